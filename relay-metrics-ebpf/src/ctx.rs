//! Loads from a tracepoint record at an offset known only at load time.
//!
//! The verifier accepts context accesses only at constant offsets encoded in the instruction, and
//! LLVM would merge `ctx + K` loads of different branches into one `ctx + off` load it rejects.
//! So each candidate offset gets its own inline-asm load (opaque to LLVM) behind an `if off == K`;
//! with `off` loaded from the frozen `.rodata` config the verifier knows which branch is taken and
//! removes the others before JIT, so a field read costs one load at run time.

/// Emits `if off == K { load(ctx + K) } else if ...` for every listed `K`.
macro_rules! load_at {
    ($ctx:expr, $off:expr, $width:literal, [$($k:literal),*]) => {'found: {
        let ctx = $ctx;
        let off = $off;
        $(
            if off == $k {
                // SAFETY: a tracepoint program may read its record at any constant offset below
                // PERF_MAX_TRACE_SIZE (the verifier checks it); the asm only loads.
                let value: u64;
                unsafe {
                    core::arch::asm!(
                        concat!("{v} = *(", $width, " *)({c} + ", stringify!($k), ")"),
                        v = out(reg) value,
                        c = in(reg) ctx,
                        options(nostack, readonly, preserves_flags),
                    );
                }
                break 'found Some(value);
            }
        )*
        let _ = ctx;
        None
    }};
}

/// The `u64` at `off` (8-byte aligned, 8..=128) of the record at `ctx`.
#[inline(always)]
pub fn u64_at(ctx: *const u8, off: u16) -> Option<u64> {
    load_at!(
        ctx,
        off,
        "u64",
        [8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128]
    )
}

/// The `u32` at `off` (4-byte aligned, 8..=124) of the record at `ctx`.
#[inline(always)]
pub fn u32_at(ctx: *const u8, off: u16) -> Option<u32> {
    load_at!(
        ctx,
        off,
        "u32",
        [
            8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68, 72, 76, 80, 84, 88, 92,
            96, 100, 104, 108, 112, 116, 120, 124
        ]
    )
    .map(|v| v as u32)
}

/// The `i16` at `off` (2-byte aligned, 8..=126) of the record at `ctx`.
#[inline(always)]
pub fn i16_at(ctx: *const u8, off: u16) -> Option<i16> {
    load_at!(
        ctx,
        off,
        "u16",
        [
            8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46, 48, 50,
            52, 54, 56, 58, 60, 62, 64, 66, 68, 70, 72, 74, 76, 78, 80, 82, 84, 86, 88, 90, 92, 94,
            96, 98, 100, 102, 104, 106, 108, 110, 112, 114, 116, 118, 120, 122, 124, 126
        ]
    )
    .map(|v| v as u16 as i16)
}

/// The `u8` at `off` (8..=63) of the record at `ctx`.
#[inline(always)]
pub fn u8_at(ctx: *const u8, off: u16) -> Option<u8> {
    load_at!(
        ctx,
        off,
        "u8",
        [
            8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
            30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51,
            52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63
        ]
    )
    .map(|v| v as u8)
}
