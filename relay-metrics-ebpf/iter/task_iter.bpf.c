// SPDX-License-Identifier: GPL-2.0
/* One binary record per thread-group leader, for the collector's process values
 * (relay-metrics/src/source/task_iter/). The record mirrors what /proc/<pid>/{stat,statm,io}
 * and the fd/ directory compute from the same kernel fields, so that user space can turn it into
 * identical values; the layout is `struct task_record` below, read field by field by the
 * user side. Every kernel access is a CO-RE read relocated at load time. */
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
};

#define MM_FILEPAGES 0
#define MM_ANONPAGES 1
#define MM_SHMEMPAGES 3

static __always_inline void read_rss(struct mm_struct *mm, struct task_record *r)
{
	if (bpf_core_field_exists(((struct mm_struct___atomic_rss *)0)->rss_stat)) {
		struct mm_struct___atomic_rss *old = (void *)mm;
		r->rss_file = BPF_CORE_READ(old, rss_stat.count[MM_FILEPAGES].counter);
		r->rss_anon = BPF_CORE_READ(old, rss_stat.count[MM_ANONPAGES].counter);
		r->rss_shmem = BPF_CORE_READ(old, rss_stat.count[MM_SHMEMPAGES].counter);
		r->status |= STATUS_RSS_ATOMIC;
	} else if (bpf_core_field_exists(mm->rss_stat)) {
		r->rss_file = BPF_CORE_READ(mm, rss_stat[MM_FILEPAGES].count);
		r->rss_anon = BPF_CORE_READ(mm, rss_stat[MM_ANONPAGES].count);
		r->rss_shmem = BPF_CORE_READ(mm, rss_stat[MM_SHMEMPAGES].count);
		r->status |= STATUS_RSS_PERCPU;
	}
}

static __always_inline void read_threads(struct task_struct *task, struct task_record *r)
{
	struct signal_struct *sig = BPF_CORE_READ(task, signal);
	if (!sig)
		return;
	r->nr_threads = (u64)BPF_CORE_READ(sig, nr_threads);
	r->utime_ns = BPF_CORE_READ(sig, utime);
	r->stime_ns = BPF_CORE_READ(sig, stime);
	r->runtime_ns = BPF_CORE_READ(sig, sum_sched_runtime);
	r->prev_utime_ns = BPF_CORE_READ(sig, prev_cputime.utime);
	r->prev_stime_ns = BPF_CORE_READ(sig, prev_cputime.stime);
	r->read_bytes = BPF_CORE_READ(sig, ioac.read_bytes);
	r->write_bytes = BPF_CORE_READ(sig, ioac.write_bytes);
	r->syscr = BPF_CORE_READ(sig, ioac.syscr);
	r->syscw = BPF_CORE_READ(sig, ioac.syscw);

	struct list_head *head = __builtin_preserve_access_index(&sig->thread_head);
	struct list_head *pos = BPF_CORE_READ(sig, thread_head.next);
	unsigned long node_offset = bpf_core_field_offset(struct task_struct, thread_node);
	int i;
	for (i = 0; i < MAX_THREADS; i++) {
		if (pos == head || !pos)
			return;
		struct task_struct *t = (void *)pos - node_offset;
		r->utime_ns += BPF_CORE_READ(t, utime);
		r->stime_ns += BPF_CORE_READ(t, stime);
		r->runtime_ns += BPF_CORE_READ(t, se.sum_exec_runtime);
		r->read_bytes += BPF_CORE_READ(t, ioac.read_bytes);
		r->write_bytes += BPF_CORE_READ(t, ioac.write_bytes);
		r->syscr += BPF_CORE_READ(t, ioac.syscr);
		r->syscw += BPF_CORE_READ(t, ioac.syscw);
		pos = BPF_CORE_READ(pos, next);
	}
	if (pos != head)
		r->status |= STATUS_THREADS_TRUNCATED;
}

static __always_inline void read_fds(struct task_struct *task, struct task_record *r)
{
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt)
		return;
	r->status |= STATUS_HAS_FILES;
	unsigned int max_fds = BPF_CORE_READ(fdt, max_fds);
	unsigned long *bits = BPF_CORE_READ(fdt, open_fds);
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

SEC("iter/task")
int task_leaders(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task)
		return 0;
	int pid = BPF_CORE_READ(task, pid);
	int tgid = BPF_CORE_READ(task, tgid);
	if (pid != tgid)
		return 0;

	struct task_record r = {};
	r.tgid = (u32)tgid;
	r.ppid = (u32)BPF_CORE_READ(task, real_parent, tgid);
	r.flags = BPF_CORE_READ(task, flags);
	r.start_boottime_ns = BPF_CORE_READ(task, start_boottime);
	r.cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);

	struct mm_struct *mm = BPF_CORE_READ(task, mm);
	if (mm && !(r.flags & PF_KTHREAD)) {
		r.status |= STATUS_HAS_MM;
		r.total_vm_pages = BPF_CORE_READ(mm, total_vm);
		read_rss(mm, &r);
	}
	read_threads(task, &r);
	if (!(r.flags & PF_KTHREAD))
		read_fds(task, &r);

	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
