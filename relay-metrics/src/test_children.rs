//! The subprocesses of the library's tests are this test binary, re-run with a variable that
//! names what the child does (an allocation past a memory limit, forks past a pids limit, a
//! busy loop, the eBPF loader child). The check runs before `main`, so a child never enters
//! libtest, and libtest lists only real tests.

/// Runs from the ELF initialisers, like C's `__attribute__((constructor))`: before libtest's
/// `main` parses the arguments. Each check reads one environment variable and returns at once
/// when it is unset; a child's body ends with `std::process::exit`.
#[used]
#[link_section = ".init_array"]
static RUN_CHILD_IF_REQUESTED: extern "C" fn() = run_child_if_requested;

extern "C" fn run_child_if_requested() {
    crate::source::ebpf::tests::run_child_if_requested();
    crate::vm_tests::run_child_if_requested();
    crate::collector::processes::iter::tests::run_child_if_requested();
    crate::collector::processes::iter::namespace_tests::run_child_if_requested();
}
