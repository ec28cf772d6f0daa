// SPDX-License-Identifier: GPL-2.0
/* One fixed-size record per cgroup of one hierarchy, for the values the kernel keeps exactly in
 * memory (relay-metrics/src/source/cgroup_iter/). User space attaches the program with the
 * hierarchy root's cgroup fd and the pre-order descendants walk; each read of the iterator runs
 * one walk. Records go to the mmap-able array `records`, not to the seq_file: the cgroup
 * iterator cannot continue a walk in a second read() (cgroup_iter_seq_start returns
 * -EOPNOTSUPP once cgroup_mutex was dropped), and one read holds at most 8 pages (~32 KiB). The
 * seq_file carries only the record count, written at the end of the walk. Every kernel access
 * is relocated at load time (CO-RE). The cgroup and its controllers' css pointers are direct
 * loads; a controller's fields are reached from its css by a computed address (container_of),
 * which the verifier does not follow, so they are read with bpf_probe_read_kernel. */
#include "cgroup_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define BPF_F_MMAPABLE (1U << 10)
/* enum bpf_map_type's BPF_MAP_TYPE_ARRAY (kernel_types.h declares only the task iterator's). */
#define MAP_TYPE_ARRAY 2

/* The most cgroups one walk records; more set the count's TRUNCATED bit. */
#define MAX_CGROUPS 16384

/* cgroup_record.valid bits: which controllers this hierarchy has (their fields are read). */
#define VALID_MEMORY 1
#define VALID_PIDS 2
#define VALID_CPU 4
#define VALID_CFS_BANDWIDTH 8
#define VALID_ROOT 16

/* Set on the count when the walk visited more than MAX_CGROUPS cgroups. */
#define COUNT_TRUNCATED (1ULL << 63)

/* All fields 64-bit: no padding, the same layout on every compiler. Raw kernel units: pages
 * for the memory page counters, ns for throttled time and the CFS quota and period (a quota of
 * RUNTIME_INF, all ones, is no quota). */
struct cgroup_record {
	u64 id;
	u64 valid;
	u64 level;
	u64 memory_usage_pages;
	u64 memory_watermark_pages;
	u64 memory_max_pages;
	u64 memory_failcnt;
	u64 memsw_usage_pages;
	u64 memsw_watermark_pages;
	u64 memsw_max_pages;
	u64 memsw_failcnt;
	u64 oom_kill;
	u64 pids_current;
	u64 pids_limit;
	u64 cfs_nr_periods;
	u64 cfs_nr_throttled;
	u64 cfs_throttled_time_ns;
	u64 cfs_quota_ns;
	u64 cfs_period_ns;
};

struct {
	__uint(type, MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MAX_CGROUPS);
	__type(key, u32);
	__type(value, struct cgroup_record);
} records SEC(".maps");

/* Records written in the current walk (reset on its first cgroup, meta->seq_num 0). */
u64 written;

/* The css of controller `subsys_id` on `cgrp`, NULL where that controller is not on this
 * hierarchy. subsys_id is a constant relocated at load time, so the slot is at a known offset
 * of the iterator's cgroup: a direct load. */
static __always_inline struct cgroup_subsys_state *css_of(struct cgroup___iter *cgrp, u32 subsys_id)
{
	struct cgroup_subsys_state **slot =
		(void *)cgrp + bpf_core_field_offset(struct cgroup___iter, subsys) +
		(u64)subsys_id * sizeof(struct cgroup_subsys_state *);
	return *slot;
}

#define CSS_OF(cgrp, controller)                                                                  \
	(bpf_core_enum_value_exists(enum cgroup_subsys_id, controller)                             \
		 ? css_of(cgrp, bpf_core_enum_value(enum cgroup_subsys_id, controller))            \
		 : 0)

/* The container of a controller's css (css is its first member today; relocated anyway). */
#define CONTAINER(css, type) ((type *)((void *)(css) - bpf_core_field_offset(type, css)))

static __always_inline void read_memory(struct cgroup_record *r, struct cgroup_subsys_state *css)
{
	struct mem_cgroup *memcg = CONTAINER(css, struct mem_cgroup);
	r->valid |= VALID_MEMORY;
	r->memory_usage_pages = BPF_CORE_READ(memcg, memory.usage.counter);
	r->memory_watermark_pages = BPF_CORE_READ(memcg, memory.watermark);
	r->memory_max_pages = BPF_CORE_READ(memcg, memory.max);
	r->memory_failcnt = BPF_CORE_READ(memcg, memory.failcnt);
	r->memsw_usage_pages = BPF_CORE_READ(memcg, memsw.usage.counter);
	r->memsw_watermark_pages = BPF_CORE_READ(memcg, memsw.watermark);
	r->memsw_max_pages = BPF_CORE_READ(memcg, memsw.max);
	r->memsw_failcnt = BPF_CORE_READ(memcg, memsw.failcnt);
	if (bpf_core_enum_value_exists(enum memcg_memory_event, MEMCG_OOM_KILL)) {
		u64 at = bpf_core_enum_value(enum memcg_memory_event, MEMCG_OOM_KILL);
		bpf_core_read(&r->oom_kill, sizeof(r->oom_kill),
			      (void *)memcg + bpf_core_field_offset(struct mem_cgroup, memory_events) +
				      at * sizeof(atomic_long_t));
	}
}

static __always_inline void read_pids(struct cgroup_record *r, struct cgroup_subsys_state *css)
{
	struct pids_cgroup *pids = CONTAINER(css, struct pids_cgroup);
	r->valid |= VALID_PIDS;
	r->pids_current = BPF_CORE_READ(pids, counter.counter);
	r->pids_limit = BPF_CORE_READ(pids, limit.counter);
}

static __always_inline void read_cpu(struct cgroup_record *r, struct cgroup_subsys_state *css)
{
	struct task_group *tg = CONTAINER(css, struct task_group);
	r->valid |= VALID_CPU;
	/* Without CONFIG_CFS_BANDWIDTH there is no cfs_bandwidth and cpu.stat has no such lines. */
	if (!bpf_core_field_exists(struct task_group, cfs_bandwidth))
		return;
	r->valid |= VALID_CFS_BANDWIDTH;
	r->cfs_nr_periods = (u32)BPF_CORE_READ(tg, cfs_bandwidth.nr_periods);
	r->cfs_nr_throttled = (u32)BPF_CORE_READ(tg, cfs_bandwidth.nr_throttled);
	r->cfs_throttled_time_ns = BPF_CORE_READ(tg, cfs_bandwidth.throttled_time);
	r->cfs_quota_ns = BPF_CORE_READ(tg, cfs_bandwidth.quota);
	r->cfs_period_ns = (u64)BPF_CORE_READ(tg, cfs_bandwidth.period);
}

SEC("iter/cgroup")
int cgroup_values(struct bpf_iter__cgroup *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct cgroup___iter *cgrp = (struct cgroup___iter *)ctx->cgroup;
	if (ctx->meta->seq_num == 0)
		written = 0;
	if (!cgrp) {
		/* The end of the walk: the count is the whole seq_file output. */
		u64 count = written;
		bpf_seq_write(seq, &count, sizeof(count));
		return 0;
	}
	u32 at = (u32)written;
	if (written >= MAX_CGROUPS) {
		written |= COUNT_TRUNCATED;
		return 0;
	}
	struct cgroup_record *r = bpf_map_lookup_elem(&records, &at);
	if (!r)
		return 0;
	__builtin_memset(r, 0, sizeof(*r));
	struct kernfs_node *kn = cgrp->kn;
	r->id = kn ? kn->id : 0;
	r->level = (u32)cgrp->level;
	if (r->level == 0)
		r->valid |= VALID_ROOT;
	struct cgroup_subsys_state *css = CSS_OF(cgrp, memory_cgrp_id);
	if (css)
		read_memory(r, css);
	css = CSS_OF(cgrp, pids_cgrp_id);
	if (css)
		read_pids(r, css);
	css = CSS_OF(cgrp, cpu_cgrp_id);
	if (css)
		read_cpu(r, css);
	written++;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
