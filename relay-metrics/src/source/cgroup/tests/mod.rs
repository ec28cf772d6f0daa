//! The cgroup readers on fixture trees (v1, v2 and hybrid layouts in `tests/fixtures/`) and, as
//! root, on live v1 cgroups of this host.

mod fixture;
mod live;
