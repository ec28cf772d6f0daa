/* The kernel types the cgroup iterator reads beyond kernel_types.h's, declared by hand with only
 * the fields it uses and relocated by CO-RE (see kernel_types.h). A header of its own: the task
 * iterator's object records kernel_types.h's checksum in its debug lines, so a change there
 * would change that object. */
#ifndef RELAY_METRICS_CGROUP_TYPES_H
#define RELAY_METRICS_CGROUP_TYPES_H

#include "kernel_types.h"

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

/* memory.events' counters; positions relocated by name. */
enum memcg_memory_event { MEMCG_LOW, MEMCG_HIGH, MEMCG_MAX, MEMCG_OOM, MEMCG_OOM_KILL };

struct page_counter {
	atomic_long_t usage;
	unsigned long failcnt;
	unsigned long watermark;
	unsigned long max;
};

struct mem_cgroup {
	struct cgroup_subsys_state css;
	struct page_counter memory;
	union {
		struct page_counter swap;
		struct page_counter memsw;
	};
	atomic_long_t memory_events[1];
};

struct pids_cgroup {
	struct cgroup_subsys_state css;
	atomic64_t counter;
	atomic64_t limit;
};

struct cfs_bandwidth {
	s64 period;
	u64 quota;
	int nr_periods;
	int nr_throttled;
	u64 throttled_time;
};

struct task_group {
	struct cgroup_subsys_state css;
	struct cfs_bandwidth cfs_bandwidth;
};

struct cgroup___iter {
	int level;
	struct kernfs_node *kn;
	/* Indexed by enum cgroup_subsys_id, as css_set.subsys. */
	struct cgroup_subsys_state *subsys[1];
};

struct bpf_iter__cgroup {
	struct bpf_iter_meta *meta;
	struct cgroup *cgroup;
};

#pragma clang attribute pop

#endif
