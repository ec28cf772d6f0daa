// The floor of a program on a tracepoint: it returns at once (benches/ebpf_event_cost.rs).
__attribute__((section("tracepoint/sched/sched_switch"), used)) int empty(void *ctx)
{
    return 0;
}

char _license[] __attribute__((section("license"), used)) = "GPL";
