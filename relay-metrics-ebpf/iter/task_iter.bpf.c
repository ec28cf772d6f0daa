// SPDX-License-Identifier: GPL-2.0
/* One binary record per thread-group leader, for the collector's process values
 * (relay-metrics/src/source/task_iter/). The record mirrors what /proc/<pid>/{stat,statm,io}
 * and the fd/ directory compute from the same kernel fields, so that user space can turn it into
 * identical values; the layout is `struct task_record` below, read field by field by the
 * user side. Every kernel access is relocated at load time (CO-RE).
 *
 * A field reached through pointers the verifier follows (the iterator's task, and the structs
 * its fields point to) is a direct load: the JIT makes it a plain load guarded against faults.
 * bpf_probe_read_kernel, a helper call several times dearer, is left where an address is
 * computed from a value known only at run time (the thread list's container_of, walked for
 * processes of several threads only, per-CPU parts, the fd bitmap, the reader's pid level),
 * which the verifier refuses to follow. A controller's slot in css_set.subsys is at an offset
 * relocated at load time, a constant to the verifier: a direct load. Every
 * pointer is checked before it is followed: on 6.2+ the verifier marks __rcu pointers it
 * does not know to be set as possibly NULL. */
#include "kernel_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define PF_KTHREAD 0x00200000

/* Walks stop here; a record that hit a bound says so and user space reads that process
 * through procfs instead. */
#define MAX_THREADS 512
#define MAX_FD_WORDS 1024

/* task_record.status bits. */
#define STATUS_THREADS_TRUNCATED 1
#define STATUS_FDS_TRUNCATED 2
#define STATUS_HAS_MM 4
#define STATUS_RSS_ATOMIC 8
#define STATUS_RSS_PERCPU 16
#define STATUS_HAS_FILES 32
#define STATUS_RSS_SUMMED 64
/* Some live thread's css_set is not the leader's: a thread sits in another cgroup. */
#define STATUS_SPLIT_CGROUPS 128
/* The unchanged-cgroup rule's fields (switches, busy_threads, cpuacct_cgroup_id, the split bit)
 * were read: `read_activity_fields` was set at load. */
#define STATUS_ACTIVITY 256
/* A thread exited while the process was read: its counters may be in neither the dead
 * threads' totals nor the live threads' sums (see read_threads). */
#define STATUS_TORN 512

/* Keeps the compiler from moving memory reads across it. */
#define compiler_barrier() asm volatile("" ::: "memory")

/* The most CPUs whose per-CPU rss parts the program adds up: beyond this, three reads per CPU
 * per process cost more than reading statm, which user space then does. */
#define MAX_SUM_CPUS 16

/* All fields 64-bit: no padding, the same layout on every compiler. */
struct task_record {
	u64 tgid;
	u64 ppid;
	u64 flags;
	u64 status;
	u64 start_boottime_ns;
	/* Thread-group CPU time as thread_group_cputime() sums it: dead threads (signal) plus
	 * every live thread; ns. */
	u64 utime_ns;
	u64 stime_ns;
	u64 runtime_ns;
	/* The kernel's clamp state for the whole-process utime/stime split (cputime_adjust). */
	u64 prev_utime_ns;
	u64 prev_stime_ns;
	u64 nr_threads;
	u64 total_vm_pages;
	/* MM_FILEPAGES, MM_ANONPAGES, MM_SHMEMPAGES: the atomic value (to 6.1) or the per-CPU
	 * counter's central count (6.2+), unclamped. */
	s64 rss_file;
	s64 rss_anon;
	s64 rss_shmem;
	/* /proc/<pid>/io, whole process: signal totals plus every live thread. */
	u64 read_bytes;
	u64 write_bytes;
	u64 syscr;
	u64 syscw;
	/* Open descriptors: population count of the fd table's open bitmap. */
	u64 open_fds;
	u64 cgroup_id;
	/* Live threads only, as the sum of task/<tid>/schedstat: run time and run-queue wait, ns. */
	u64 live_runtime_ns;
	u64 run_delay_ns;
	/* 6.2+: each rss counter's central count plus every CPU's part (percpu_counter_sum),
	 * unclamped; valid with STATUS_RSS_SUMMED. */
	s64 rss_sum_file;
	s64 rss_sum_anon;
	s64 rss_sum_shmem;
	/* The cgroup id in the v1 hierarchy of controller `v1_controller` (membership_v1), 0 where
	 * there is none: on a v1 or hybrid host the agent groups processes by the hierarchy it
	 * walks, which the unified id above does not describe. */
	u64 v1_cgroup_id;
	u64 v1_controller;
	/* For the unchanged-cgroup rule (relay-metrics/src/collector/targets/unchanged.rs):
	 * context switches (nvcsw + nivcsw) of dead threads (signal) plus every live thread; the
	 * live threads that are on a CPU, on a run queue, in iowait or in a memstall; and the
	 * cgroup id in the v1 cpuacct hierarchy (0 where cpuacct is not on v1). */
	u64 switches;
	u64 busy_threads;
	u64 cpuacct_cgroup_id;
	/* The network namespace's inode number (task->nsproxy->net_ns->ns.inum): what a stat of
	 * /proc/<pid>/ns/net gives as st_ino. 0 where the task has none (exiting: nsproxy is NULL);
	 * no namespace has inode 0. */
	u64 net_ns_inode;
};

/* The user side reads this many 64-bit fields (RECORD_FIELDS in
 * relay-metrics/src/source/task_iter/mod.rs). */
_Static_assert(sizeof(struct task_record) == 32 * 8, "task_record is 32 u64 fields");

/* Never read or written: its per-CPU value addresses give the kernel's per-CPU base offsets
 * (below). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} cpu_base SEC(".maps");

/* Set by user space at load: the controller whose v1 hierarchy the agent walks for membership,
 * 1 to 4 for memory, cpu, cpuacct, pids (the first of them mounted as v1), 0 for none. */
const volatile u32 membership_v1 = 0;

/* Set by user space at load: whether the exact resident size is wanted (the per-CPU sums cost
 * a dozen reads per process). */
const volatile u32 sum_rss = 0;
/* Set by user space where the verifier takes the per-thread reads of the unchanged-cgroup rule:
 * with them, the thread walk passes 6.18's verifier but exceeds 6.1's million instructions. A
 * constant of the frozen read-only map, so with 0 the verifier drops those reads unseen. */
const volatile u32 read_activity_fields = 0;

/* The reading process's PID namespace and level, for the read session `reader_session`
 * (bpf_iter_meta.session_id, unique per read): found on the session's first task. */
u64 reader_session;
u64 reader_ns;
u32 reader_level;

/* The kernel's per-CPU offset of each CPU (__per_cpu_offset[cpu]), found on the first visit:
 * cpu_offsets_state 0 = not yet, 1 = cpu_count offsets known, 2 = not available. */
u64 cpu_offsets[MAX_SUM_CPUS];
u32 cpu_count;
u32 cpu_offsets_state;

/* The value of a pointer as a plain number, through memory, so that the verifier lets it take
 * part in arithmetic (it refuses arithmetic on map pointers). */
static __always_inline u64 address_of(const void *pointer)
{
	u64 value = 0;
	bpf_probe_read_kernel(&value, sizeof(value), &pointer);
	return value;
}

/* A per-CPU pointer P is reached on CPU c at P + __per_cpu_offset[c]. That symbol is not
 * visible to BPF here (no KALLSYMS_ALL, no __percpu BTF tags), but the map above holds one
 * per-CPU pointer (bpf_array.pptrs[0]) and the kernel hands out its per-CPU addresses
 * (bpf_map_lookup_percpu_elem): the difference is the CPU's offset. */
static __always_inline void find_cpu_offsets(void)
{
	u64 map = address_of(&cpu_base);
	u64 base = 0;
	u32 key = 0;
	u32 cpu;
	if (bpf_probe_read_kernel(&base, sizeof(base),
				  (void *)(map + bpf_core_field_offset(struct bpf_array, pptrs))) ||
	    !base) {
		cpu_offsets_state = 2;
		return;
	}
	for (cpu = 0; cpu <= MAX_SUM_CPUS; cpu++) {
		void *value = bpf_map_lookup_percpu_elem(&cpu_base, &key, cpu);
		if (!value)
			break;
		if (cpu == MAX_SUM_CPUS) {
			cpu_offsets_state = 2;
			return;
		}
		cpu_offsets[cpu] = address_of(value) - base;
	}
	cpu_count = cpu;
	cpu_offsets_state = 1;
}

/* percpu_counter_sum without the lock: the central count plus every CPU's part. The central
 * count and the per-CPU pointer are direct loads; each CPU's part is at a computed address,
 * read with bpf_probe_read_kernel. The array index must be a constant where the CO-RE access is
 * written (the kernel's element size differs from the declared one), hence a macro. */
#define COUNTER_SUM(mm, kind)                                                                      \
	counter_sum((mm)->rss_stat[kind].count, (u64)(mm)->rss_stat[kind].counters)

static __always_inline s64 counter_sum(s64 sum, u64 counters)
{
	u32 cpu;
	for (cpu = 0; cpu < MAX_SUM_CPUS; cpu++) {
		if (cpu >= cpu_count)
			break;
		s32 part = 0;
		bpf_probe_read_kernel(&part, sizeof(part), (void *)(counters + cpu_offsets[cpu]));
		sum += part;
	}
	return sum;
}

#define MM_FILEPAGES 0
#define MM_ANONPAGES 1
#define MM_SWAPENTS 2
#define MM_SHMEMPAGES 3
#define NR_MM_COUNTERS 4

/* From 6.6 an mm's counters are allocated in one per-CPU block (percpu_counter_init_many), so
 * each CPU's parts of the four lie side by side, one s32 each, in counter order: one read per
 * CPU then gets all three instead of one read per counter. The pointers are compared for every
 * process, so a kernel that places them otherwise is summed counter by counter. */
static __always_inline int counters_adjacent(u64 file, u64 anon, u64 swap, u64 shmem)
{
	return anon == file + sizeof(s32) && swap == file + 2 * sizeof(s32) &&
	       shmem == file + 3 * sizeof(s32);
}

static __always_inline void sum_adjacent(struct mm_struct *mm, u64 parts, struct task_record *r)
{
	s64 file = mm->rss_stat[MM_FILEPAGES].count;
	s64 anon = mm->rss_stat[MM_ANONPAGES].count;
	s64 shmem = mm->rss_stat[MM_SHMEMPAGES].count;
	u32 cpu;
	for (cpu = 0; cpu < MAX_SUM_CPUS; cpu++) {
		if (cpu >= cpu_count)
			break;
		s32 part[NR_MM_COUNTERS] = {};
		bpf_probe_read_kernel(part, sizeof(part), (void *)(parts + cpu_offsets[cpu]));
		file += part[MM_FILEPAGES];
		anon += part[MM_ANONPAGES];
		shmem += part[MM_SHMEMPAGES];
	}
	r->rss_sum_file = file;
	r->rss_sum_anon = anon;
	r->rss_sum_shmem = shmem;
}

static __always_inline void read_rss(struct mm_struct *mm, struct task_record *r)
{
	if (bpf_core_field_exists(((struct mm_struct___atomic_rss *)0)->rss_stat)) {
		/* Read by address: 6.1's verifier does not follow an array of atomic_long_t (a
		 * typedef of a struct). */
		struct mm_struct___atomic_rss *old = (void *)mm;
		r->rss_file = BPF_CORE_READ(old, rss_stat.count[MM_FILEPAGES].counter);
		r->rss_anon = BPF_CORE_READ(old, rss_stat.count[MM_ANONPAGES].counter);
		r->rss_shmem = BPF_CORE_READ(old, rss_stat.count[MM_SHMEMPAGES].counter);
		r->status |= STATUS_RSS_ATOMIC;
	} else if (bpf_core_field_exists(mm->rss_stat)) {
		r->rss_file = mm->rss_stat[MM_FILEPAGES].count;
		r->rss_anon = mm->rss_stat[MM_ANONPAGES].count;
		r->rss_shmem = mm->rss_stat[MM_SHMEMPAGES].count;
		r->status |= STATUS_RSS_PERCPU;
		if (sum_rss && cpu_offsets_state == 0)
			find_cpu_offsets();
		if (sum_rss && cpu_offsets_state == 1) {
			u64 file = (u64)mm->rss_stat[MM_FILEPAGES].counters;
			if (counters_adjacent(file, (u64)mm->rss_stat[MM_ANONPAGES].counters,
					      (u64)mm->rss_stat[MM_SWAPENTS].counters,
					      (u64)mm->rss_stat[MM_SHMEMPAGES].counters)) {
				sum_adjacent(mm, file, r);
			} else {
				r->rss_sum_file = COUNTER_SUM(mm, MM_FILEPAGES);
				r->rss_sum_anon = COUNTER_SUM(mm, MM_ANONPAGES);
				r->rss_sum_shmem = COUNTER_SUM(mm, MM_SHMEMPAGES);
			}
			r->status |= STATUS_RSS_SUMMED;
		}
	}
}

/* The fields of the unchanged-cgroup rule, as CO-RE flavors of the kernel's structs (declared
 * here rather than in kernel_types.h, which the cgroup iterator shares). */
struct signal_struct___activity {
	unsigned long nvcsw;
	unsigned long nivcsw;
} __attribute__((preserve_access_index));

struct task_struct___activity {
	struct css_set *cgroups;
	int on_cpu;
	int on_rq;
	unsigned long nvcsw;
	unsigned long nivcsw;
	/* Bitfields: read with BPF_CORE_READ_BITFIELD_PROBED (in_memstall needs CONFIG_PSI). */
	unsigned int in_iowait : 1;
	unsigned int in_memstall : 1;
} __attribute__((preserve_access_index));

/* The network namespace's path from the task, as CO-RE flavors (declared here rather than in
 * kernel_types.h, which the cgroup iterator shares). */
struct ns_common___netns {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net___netns {
	struct ns_common___netns ns;
} __attribute__((preserve_access_index));

struct nsproxy___netns {
	struct net___netns *net_ns;
} __attribute__((preserve_access_index));

struct task_struct___netns {
	struct nsproxy___netns *nsproxy;
} __attribute__((preserve_access_index));

/* The inode number /proc/<pid>/ns/net has (nsfs gives a namespace's inode ns.inum), 0 where
 * the task has no nsproxy (it is exiting). Unlike procfs the read takes no task_lock: a task
 * exiting meanwhile may give a stale value, which user space checks by a stat after reading a
 * namespace through it anyway. */
static __always_inline u64 net_ns_inode(struct task_struct *task)
{
	struct task_struct___netns *t = (void *)task;
	struct nsproxy___netns *nsproxy = t->nsproxy;
	if (!nsproxy)
		return 0;
	struct net___netns *net = nsproxy->net_ns;
	if (!net)
		return 0;
	return net->ns.inum;
}

/* A field of the iterator's own task: a direct load (see the top of this file). */
#define DIRECT(t, field) ((t)->field)

/* One live thread's counters, as thread_group_cputime(), /proc/<pid>/io and
 * task/<tid>/schedstat add them up. READ is DIRECT for the iterator's own task and
 * BPF_CORE_READ for a thread reached through the thread list. */
#define ADD_THREAD(r, t, READ)                                                                     \
	do {                                                                                       \
		u64 runtime = READ(t, se.sum_exec_runtime);                                        \
		(r)->utime_ns += READ(t, utime);                                                   \
		(r)->stime_ns += READ(t, stime);                                                   \
		(r)->runtime_ns += runtime;                                                        \
		(r)->live_runtime_ns += runtime;                                                   \
		(r)->run_delay_ns += READ(t, sched_info.run_delay);                                \
		(r)->read_bytes += READ(t, ioac.read_bytes);                                       \
		(r)->write_bytes += READ(t, ioac.write_bytes);                                     \
		(r)->syscr += READ(t, ioac.syscr);                                                 \
		(r)->syscw += READ(t, ioac.syscw);                                                 \
	} while (0)

/* One live thread's part of the unchanged-cgroup rule. A thread is quiet when it is off every
 * CPU (on_cpu is cleared last in a switch, after the kernel counted the switch and charged its
 * time) and off every run queue, and in neither iowait nor a memstall: then no CPU time is
 * charged to it and it adds to no pressure state. The state is read before the switch counts:
 * a thread quiet when its state was read that ran since the last record has switched out since,
 * so its count moved by the time it is read, and a quiet record with the last record's count
 * means the thread did not run between the two. (Read the other way round, a thread could run
 * and sleep again between the count and the state, and look quiet with the old count.) READ as
 * for ADD_THREAD; BITFIELD is BPF_CORE_READ_BITFIELD with it (a direct load of the bits'
 * storage unit, which the verifier takes as a number) and BPF_CORE_READ_BITFIELD_PROBED with
 * BPF_CORE_READ. */
#define ADD_ACTIVITY(r, thread, READ, BITFIELD)                                                    \
	do {                                                                                       \
		struct task_struct___activity *a = (void *)(thread);                               \
		int busy = READ(a, on_cpu) != 0;                                                   \
		if (READ(a, on_rq))                                                                \
			busy = 1;                                                                  \
		if (BITFIELD(a, in_iowait))                                                        \
			busy = 1;                                                                  \
		if (bpf_core_field_exists(a->in_memstall) && BITFIELD(a, in_memstall))             \
			busy = 1;                                                                  \
		compiler_barrier();                                                                \
		(r)->switches += READ(a, nvcsw) + READ(a, nivcsw);                                 \
		(r)->busy_threads += busy;                                                         \
	} while (0)

static __always_inline void read_thread_group(struct task_struct *task, struct signal_struct *sig,
					     struct task_record *r)
{
	r->nr_threads = (u64)sig->nr_threads;
	r->utime_ns = sig->utime;
	r->stime_ns = sig->stime;
	r->runtime_ns = sig->sum_sched_runtime;
	r->prev_utime_ns = sig->prev_cputime.utime;
	r->prev_stime_ns = sig->prev_cputime.stime;
	r->read_bytes = sig->ioac.read_bytes;
	r->write_bytes = sig->ioac.write_bytes;
	r->syscr = sig->ioac.syscr;
	r->syscw = sig->ioac.syscw;
	/* Compared with each thread's css_set as read below: a number, like them. */
	struct css_set *cset = 0;
	if (read_activity_fields) {
		struct signal_struct___activity *sig_activity = (void *)sig;
		r->switches = sig_activity->nvcsw + sig_activity->nivcsw;
		cset = BPF_CORE_READ(task, cgroups);
	}

	/* Most processes have one thread, and then it is this task, the leader: a thread is
	 * counted in nr_threads from the fork that lists it to the release that unlists it, and a
	 * leader that exits first stays listed (a zombie) until the last thread is released. Its
	 * fields are direct loads; the thread list is walked by address only for several
	 * threads. A single thread is in no other cgroup than its own. */
	if (r->nr_threads == 1) {
		ADD_THREAD(r, task, DIRECT);
		if (read_activity_fields)
			ADD_ACTIVITY(r, task, DIRECT, BPF_CORE_READ_BITFIELD);
		return;
	}

	struct list_head *head = __builtin_preserve_access_index(&sig->thread_head);
	struct list_head *pos = BPF_CORE_READ(sig, thread_head.next);
	unsigned long node_offset = bpf_core_field_offset(struct task_struct, thread_node);
	int i;
	for (i = 0; i < MAX_THREADS; i++) {
		if (pos == head || !pos)
			return;
		struct task_struct *t = (void *)pos - node_offset;
		ADD_THREAD(r, t, BPF_CORE_READ);
		if (read_activity_fields) {
			ADD_ACTIVITY(r, t, BPF_CORE_READ, BPF_CORE_READ_BITFIELD_PROBED);
			if ((struct css_set *)BPF_CORE_READ(t, cgroups) != cset)
				r->status |= STATUS_SPLIT_CGROUPS;
		}
		pos = BPF_CORE_READ(pos, next);
	}
	if (pos != head)
		r->status |= STATUS_THREADS_TRUNCATED;
}

/* The process's counters: the dead threads' totals in signal_struct plus every live thread's.
 * __exit_signal adds an exiting thread to the totals and unlists it inside one write section of
 * sig->stats_lock (whose count is odd inside it), and thread_group_cputime() and
 * /proc/<pid>/io read under that lock. Here the totals and the live threads are read between
 * two reads of the count: a record read across an exit, which may hold the thread in neither
 * sum, is marked torn, and user space reads that process through procfs for the pass. */
static __always_inline void read_threads(struct task_struct *task, struct task_record *r)
{
	struct signal_struct *sig = task->signal;
	if (!sig)
		return;
	unsigned int before = sig->stats_lock.seqcount.seqcount.sequence;
	compiler_barrier();
	read_thread_group(task, sig, r);
	compiler_barrier();
	if ((before & 1) || sig->stats_lock.seqcount.seqcount.sequence != before)
		r->status |= STATUS_TORN;
}

static __always_inline void read_fds(struct task_struct *task, struct task_record *r)
{
	struct files_struct *files = task->files;
	if (!files)
		return;
	struct fdtable *fdt = files->fdt;
	if (!fdt)
		return;
	r->status |= STATUS_HAS_FILES;
	unsigned int max_fds = fdt->max_fds;
	/* A pointer to numbers: the verifier gives a number, read through by address below. */
	unsigned long *bits = fdt->open_fds;
	unsigned int words = (max_fds + 63) / 64;
	u64 count = 0;
	unsigned int i;
	for (i = 0; i < MAX_FD_WORDS; i++) {
		if (i >= words)
			break;
		u64 word = 0;
		bpf_probe_read_kernel(&word, sizeof(word), bits + i);
		count += __builtin_popcountll(word);
	}
	if (words > MAX_FD_WORDS)
		r->status |= STATUS_FDS_TRUNCATED;
	r->open_fds = count;
}

/* The id of the cgroup the task set `cset` has in the hierarchy of controller `subsys_id`, 0
 * when that controller is bound to the unified hierarchy (`dfl_root`) or the task has none. */
static __always_inline u64 v1_cgroup_id(struct css_set *cset, struct cgroup_root *dfl_root,
					u32 subsys_id)
{
	/* subsys_id is a constant relocated at load time: the slot is at a known offset of the
	 * css_set, so every load here is direct. */
	struct cgroup_subsys_state **slot =
		(void *)cset + bpf_core_field_offset(struct css_set, subsys) +
		(u64)subsys_id * sizeof(struct cgroup_subsys_state *);
	struct cgroup_subsys_state *css = *slot;
	if (!css)
		return 0;
	struct cgroup *cgrp = css->cgroup;
	if (!cgrp || cgrp->root == dfl_root)
		return 0;
	struct kernfs_node *kn = cgrp->kn;
	return kn ? kn->id : 0;
}

#define V1_CGROUP_ID(cset, dfl_root, controller)                                                   \
	(bpf_core_enum_value_exists(enum cgroup_subsys_id, controller)                             \
		 ? v1_cgroup_id(cset, dfl_root, bpf_core_enum_value(enum cgroup_subsys_id, controller)) \
		 : 0)

/* pid_nr_ns: the number of `pid` in namespace `ns` at `level`, 0 where it has none. */
static __always_inline u32 pid_nr_in(struct pid *pid, unsigned int level, struct pid_namespace *ns)
{
	if (!pid || level > 32 || BPF_CORE_READ(pid, level) < level)
		return 0;
	struct upid *upid = (void *)pid + bpf_core_field_offset(struct pid, numbers) +
			    (u64)level * bpf_core_type_size(struct upid);
	if (BPF_CORE_READ(upid, ns) != ns)
		return 0;
	return (u32)BPF_CORE_READ(upid, nr);
}

/* The task's cgroup ids: unified, the v1 hierarchy of membership, cpuacct's. */
static __always_inline void read_cgroups(struct task_struct *task, struct task_record *r)
{
	struct css_set *cset = task->cgroups;
	if (!cset)
		return;
	struct cgroup *dfl_cgrp = cset->dfl_cgrp;
	if (!dfl_cgrp)
		return;
	struct kernfs_node *kn = dfl_cgrp->kn;
	if (kn)
		r->cgroup_id = kn->id;
	if (membership_v1) {
		struct cgroup_root *dfl_root = dfl_cgrp->root;
		if (membership_v1 == 1)
			r->v1_cgroup_id = V1_CGROUP_ID(cset, dfl_root, memory_cgrp_id);
		else if (membership_v1 == 2)
			r->v1_cgroup_id = V1_CGROUP_ID(cset, dfl_root, cpu_cgrp_id);
		else if (membership_v1 == 3)
			r->v1_cgroup_id = V1_CGROUP_ID(cset, dfl_root, cpuacct_cgrp_id);
		else if (membership_v1 == 4)
			r->v1_cgroup_id = V1_CGROUP_ID(cset, dfl_root, pids_cgrp_id);
		if (r->v1_cgroup_id)
			r->v1_controller = membership_v1;
	}
	if (read_activity_fields)
		r->cpuacct_cgroup_id = V1_CGROUP_ID(cset, dfl_cgrp->root, cpuacct_cgrp_id);
}

SEC("iter/task")
int task_leaders(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task)
		return 0;
	/* Direct loads from the iterator's trusted task pointer: every thread passes here. */
	int pid = task->pid;
	int tgid = task->tgid;
	if (pid != tgid)
		return 0;

	/* Pids as the reading process's PID namespace sees them: the iterator runs in read(2), so
	 * the current task is the reader. task->tgid is the initial namespace's number. */
	u64 session = ctx->meta->session_id;
	if (session != reader_session) {
		struct task_struct *reader = (void *)bpf_get_current_task();
		struct pid *reader_pid = BPF_CORE_READ(reader, thread_pid);
		if (!reader_pid)
			return 0;
		unsigned int reader_pid_level = BPF_CORE_READ(reader_pid, level);
		if (reader_pid_level > 32)
			return 0;
		struct upid *reader_upid = (void *)reader_pid +
					   bpf_core_field_offset(struct pid, numbers) +
					   (u64)reader_pid_level * bpf_core_type_size(struct upid);
		reader_ns = (u64)BPF_CORE_READ(reader_upid, ns);
		reader_level = reader_pid_level;
		reader_session = session;
	}
	unsigned int level = reader_level;
	struct pid_namespace *ns = (void *)reader_ns;

	struct task_record r = {};
	r.net_ns_inode = net_ns_inode(task);
	if (level == 0) {
		/* The initial namespace: its numbers are the task's own. */
		r.tgid = (u32)tgid;
		struct task_struct *parent = task->real_parent;
		r.ppid = parent ? (u32)parent->tgid : 0;
	} else {
		r.tgid = pid_nr_in(BPF_CORE_READ(task, thread_pid), level, ns);
		if (!r.tgid)
			return 0;
		/* As task_ppid_nr_ns: the real parent's thread group, not the thread that forked. */
		r.ppid = pid_nr_in(BPF_CORE_READ(task, real_parent, group_leader, thread_pid), level,
				   ns);
	}
	r.flags = task->flags;
	r.start_boottime_ns = task->start_boottime;
	read_cgroups(task, &r);
	if (read_activity_fields)
		r.status |= STATUS_ACTIVITY;

	struct mm_struct *mm = task->mm;
	if (mm && !(r.flags & PF_KTHREAD)) {
		r.status |= STATUS_HAS_MM;
		r.total_vm_pages = mm->total_vm;
		read_rss(mm, &r);
	}
	read_threads(task, &r);
	if (!(r.flags & PF_KTHREAD))
		read_fds(task, &r);

	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
