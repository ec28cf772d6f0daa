//! Tests that need a pure cgroup v2 kernel with the cpu, memory and pids controllers: they are
//! ignored on the (hybrid) host and run inside the VM by `cargo xtask vm-test`.
