// SPDX-License-Identifier: Apache-2.0
//! The process's allocator, set once when a server starts.
//!
//! glibc's malloc gives each new thread an arena of its own, up to eight per core, and
//! keeps what is freed in each for later calls of that arena's threads. A Python
//! server runs its calls on several threads (workers, executors, the fresh thread a
//! blocked call hands its lane to), and a call with a large payload allocates megabytes
//! (the `str` or `bytes` of its params) on whichever runs it: each arena touched keeps
//! some of them, and the process grew by as many arenas as threads had come and gone
//! (the Python soak test on io_uring: RSS 94.5 to 163.5 MiB in 10 minutes while executors
//! went from 6 to 27). Two arenas hold the same memory and reuse it: the GIL lets one
//! thread run Python at a time, so they are seldom contended.

/// Arenas glibc may create for the whole process (the main one included).
const ARENAS: i32 = 2;

/// Limit glibc's arenas to [`ARENAS`], once per process, unless the environment chose a
/// number (`MALLOC_ARENA_MAX` or `GLIBC_TUNABLES=glibc.malloc.arena_max=N`, which glibc
/// reads itself) or the allocator is not glibc's.
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
            if std::env::var_os("MALLOC_ARENA_MAX").is_none() && !tunables.contains("arena_max") {
                // SAFETY: mallopt only changes glibc's allocator parameters; it takes the
                // allocator's own lock and arenas created before it are kept as they are.
                unsafe {
                    libc::mallopt(libc::M_ARENA_MAX, ARENAS);
                }
            }
        });
    }
}
