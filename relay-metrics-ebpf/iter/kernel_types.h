/* The few kernel types the task iterator reads, declared by hand with only the fields it uses.
 * `preserve_access_index` makes every access a CO-RE relocation: the loader moves each offset
 * to the running kernel's layout (from /sys/kernel/btf/vmlinux), so nothing here bakes in a
 * layout. Written by hand instead of a generated vmlinux.h so that the object does not depend
 * on the build machine's kernel (`cargo xtask check-ebpf-fresh` rebuilds it byte for byte). */
#ifndef RELAY_METRICS_KERNEL_TYPES_H
#define RELAY_METRICS_KERNEL_TYPES_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef __u64 u64;
typedef __u32 u32;
typedef __s64 s64;
typedef __s32 s32;

enum bpf_map_type { BPF_MAP_TYPE_UNSPEC = 0, BPF_MAP_TYPE_PERCPU_ARRAY = 6 };

/* The controllers whose v1 hierarchy can define cgroup membership (the agent walks the first
 * of memory, cpu, cpuacct and pids that is mounted as v1). Values are relocated by name: the
 * kernel numbers its controllers by its configuration. */
enum cgroup_subsys_id { cpu_cgrp_id, cpuacct_cgrp_id, memory_cgrp_id, pids_cgrp_id };

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct list_head {
	struct list_head *next;
	struct list_head *prev;
};

typedef struct {
	s64 counter;
} atomic64_t;
typedef atomic64_t atomic_long_t;

struct task_io_accounting {
	u64 rchar;
	u64 wchar;
	u64 syscr;
	u64 syscw;
	u64 read_bytes;
	u64 write_bytes;
};

struct prev_cputime {
	u64 utime;
	u64 stime;
};

struct sched_entity {
	u64 sum_exec_runtime;
};

struct sched_info {
	unsigned long long run_delay;
};

struct pid_namespace;

struct upid {
	int nr;
	struct pid_namespace *ns;
};

struct pid {
	unsigned int level;
	struct upid numbers[];
};

/* Only the per-CPU value pointers of a per-CPU array map (see task_iter.bpf.c). */
struct bpf_array {
	u32 elem_size;
	void *pptrs[];
};

struct kernfs_node {
	u64 id;
};

struct cgroup_root;

struct cgroup {
	struct kernfs_node *kn;
	struct cgroup_root *root;
};

struct cgroup_subsys_state {
	struct cgroup *cgroup;
};

struct css_set {
	/* Indexed by enum cgroup_subsys_id; only its offset is relocated (the index is not a
	 * constant), so its declared length does not matter. */
	struct cgroup_subsys_state *subsys[1];
	struct cgroup *dfl_cgrp;
};

struct fdtable {
	unsigned int max_fds;
	unsigned long *open_fds;
};

struct files_struct {
	struct fdtable *fdt;
};

/* Linux 6.2 and later: one per-CPU counter per rss kind. */
struct percpu_counter {
	s64 count;
	s32 *counters;
};

struct mm_struct {
	unsigned long total_vm;
	struct percpu_counter rss_stat[4];
};

/* Linux up to 6.1: an array of atomics. */
struct mm_rss_stat {
	atomic_long_t count[4];
};

struct mm_struct___atomic_rss {
	struct mm_rss_stat rss_stat;
};

/* A seqlock_t's count, odd while a writer is inside its write section. */
struct seqcount {
	unsigned int sequence;
};

struct seqcount_spinlock {
	struct seqcount seqcount;
};

typedef struct {
	struct seqcount_spinlock seqcount;
} seqlock_t;

struct signal_struct {
	seqlock_t stats_lock;
	int nr_threads;
	struct list_head thread_head;
	struct prev_cputime prev_cputime;
	u64 utime;
	u64 stime;
	unsigned long long sum_sched_runtime;
	struct task_io_accounting ioac;
};

struct task_struct {
	unsigned int flags;
	struct sched_entity se;
	struct mm_struct *mm;
	int pid;
	int tgid;
	struct task_struct *real_parent;
	struct task_struct *group_leader;
	struct list_head thread_node;
	struct pid *thread_pid;
	struct sched_info sched_info;
	u64 utime;
	u64 stime;
	u64 start_boottime;
	struct files_struct *files;
	struct signal_struct *signal;
	struct css_set *cgroups;
	struct task_io_accounting ioac;
};

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
	u64 session_id;
	u64 seq_num;
};

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
};

#pragma clang attribute pop

#endif
