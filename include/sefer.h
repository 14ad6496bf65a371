/* sefer.h - public interface of the sefer allocator.
 *
 * Programs that LD_PRELOAD libsefer.so need nothing from this header: the
 * standard malloc family is interposed.  Programs that link sefer (shared or
 * static) can also call the prefixed API below, read statistics and inspect
 * or change knobs at run time. */
#ifndef SEFER_H
#define SEFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SEFER_EXPORT __attribute__((visibility("default")))
#else
#define SEFER_EXPORT
#endif

#define SEFER_VERSION_STRING "0.1.0"

/* Geometry, for information: segments are SEFER_SEGMENT_SIZE bytes and
 * aligned to it; requests up to SEFER_SMALL_MAX come from 64 KiB pages, up to
 * SEFER_MEDIUM_MAX from 1 MiB pages, larger ones from whole segments. */
#define SEFER_SEGMENT_SIZE ((size_t)4 << 20)
#define SEFER_SMALL_MAX ((size_t)8 << 10)
#define SEFER_MEDIUM_MAX ((size_t)256 << 10)

SEFER_EXPORT const char *sefer_version(void);

/* What this library was built from (docs/api.md): sefer_build() is the git
 * commit ("a3f9c2e"), with "-dirty" when the tree had uncommitted changes
 * to tracked files, the BUILD_ID of a `meson dist` tarball, or "unknown";
 * sefer_build_options() is the build's configuration as space-separated
 * key=value words ("buildtype=release optimization=3 ... b_sanitize=none
 * override=true ...").  Both are static strings, safe to call at any time. */
SEFER_EXPORT const char *sefer_build(void);
SEFER_EXPORT const char *sefer_build_options(void);

/* The prefixed API behaves exactly like the standard function of the same
 * name (errno included). */
SEFER_EXPORT void *sefer_malloc(size_t size);
SEFER_EXPORT void *sefer_calloc(size_t count, size_t size);
SEFER_EXPORT void *sefer_realloc(void *ptr, size_t size);
SEFER_EXPORT void *sefer_reallocarray(void *ptr, size_t count, size_t size);
SEFER_EXPORT void sefer_free(void *ptr);
SEFER_EXPORT int sefer_posix_memalign(void **out, size_t alignment, size_t size);
SEFER_EXPORT void *sefer_aligned_alloc(size_t alignment, size_t size);
SEFER_EXPORT void *sefer_memalign(size_t alignment, size_t size);
SEFER_EXPORT size_t sefer_usable_size(const void *ptr);

/* Returns memory the process no longer uses to the OS: drains the calling
 * thread's heap and abandoned heaps, purges the large cache, decommits
 * empty pages and gives back the pages of the thread's free medium blocks.
 * Returns the number of bytes decommitted, unmapped or given back. */
SEFER_EXPORT size_t sefer_trim(void);

/* Every statistic, declared once: X(name, meaning).  All are uint64_t.
 * "bytes" figures are exact byte counts of the named quantity. */
#define SEFER_STATS_FIELDS(X)                                                              \
    X(bytes_in_blocks, "bytes in allocated blocks (block sizes, not requested sizes)")      \
    X(bytes_committed, "bytes of segment memory made available and not decommitted")       \
    X(bytes_reserved, "bytes of address space mapped for segments, cached spans included") \
    X(bytes_metadata, "bytes of segment headers, heap rings and registry")                 \
    X(bytes_decommitted_total, "bytes returned to the OS by decommit or unmap, cumulative") \
    X(segments, "segments mapped now (4 MiB units, cached spans included)")                \
    X(segments_peak, "highest value of segments")                                          \
    X(large_cache_bytes, "bytes held in the large cache")                                  \
    X(large_cache_spans, "spans held in the large cache")                                  \
    X(large_cache_hits, "large or segment requests served from the cache")                 \
    X(large_cache_misses, "large or segment requests that needed a new mapping")           \
    X(os_maps, "mappings created with mmap")                                                \
    X(allocs, "allocations served, cumulative")                                            \
    X(frees, "frees performed, cumulative")                                                \
    X(remote_frees, "frees of blocks owned by another thread's heap")                      \
    X(ring_pushes, "remote frees delivered through a heap's ring (full pages, owners gone, checks)") \
    X(ring_overflows, "remote frees that found the ring full and took the overflow list")  \
    X(enomem, "allocations refused with ENOMEM")                                            \
    X(heaps_live, "heap registry slots owned by a running thread")                         \
    X(heaps_abandoned, "heap registry slots whose thread exited with blocks still live")   \
    X(fallback_allocs, "allocations served by the locked fallback heap (threads that allocate rarely, threads.heap_after, included)") \
    X(guard_invalid_free, "frees of pointers sefer does not own (and, level 3, deletes not matching new)") \
    X(guard_interior_free, "frees of pointers inside a block")                             \
    X(guard_double_free, "double frees detected")                                          \
    X(guard_overflow, "writes outside a block found by its canary or size word (level >= 2), or memcpy/memmove/memset out of bounds (level 3)") \
    X(guard_use_after_free, "writes into a freed block found on reuse (level >= 2)")         \
    X(remote_list_frees, "remote frees that went onto their page's list, counted as the owner takes them back") \
    X(heap_slots, "heaps made so far (live, abandoned or free): the most threads alive at once") \
    X(profile_samples, "heap profiling: allocations sampled, cumulative")                 \
    X(profile_dropped, "heap profiling: samples lost because the profile's tables were full") \
    X(profile_live_samples, "heap profiling: sampled blocks live now")                   \
    X(profile_bytes, "heap profiling: memory the profile's tables take")                \
    X(heap_fallbacks, "threads that could get no heap (all heaps owned, or no memory) and use the locked fallback heap, cumulative") \
    X(bytes_shed_on_growth, "idle resident bytes decommitted ahead of their delay because memory not resident was about to be used, cumulative") \
    X(memory_limit, "memory.limit in force, in bytes (the cgroup's with auto; 0: none)")      \
    X(memory_headroom, "memory_limit minus bytes_committed (0 at or past it, or with no limit)") \
    X(memory_limit_purges, "purges of every idle page and cached span because committed memory neared memory.limit, cumulative") \
    X(memory_limit_refusals, "allocations refused because they would pass memory.limit (memory.limit_action = fail), cumulative") \
    X(bytes_exited_waiting, "bytes of empty pages kept committed for the threads that adopt the heaps of exited threads (at most decommit.exited_keep)") \
    X(bytes_remote_pending, "bytes of blocks other threads freed that wait on their pages' remote lists for their owner to take them back") \
    X(profile_unwind_fallbacks, "heap profiling: stacks sefer's table walk could not follow, read by libgcc's unwinder instead, cumulative") \
    X(profile_unwind_disagreements, "heap profiling, profile.unwinder = check: stacks where sefer's walk and libgcc's differed, cumulative") \
    X(guard_samples, "sampled guard (guard.sample_bytes): allocations placed against an inaccessible page, cumulative") \
    X(guard_samples_live, "sampled guard: such blocks live now (at most 64)")                \
    X(bytes_waiting, "bytes of empty pages all heaps keep committed for reuse (bytes_exited_waiting included); past threads.cache_max, those past their decommit.delay go back") \
    X(cache_max_purges, "purges of waiting pages because bytes_waiting passed threads.cache_max, cumulative") \
    X(bytes_cache_max_purged, "bytes those purges gave back to the OS, cumulative") \
    X(remote_batch_frees, "remote frees that came back to their owner in a batch of the freeing thread's, counted as the owner takes them back") \
    X(profile_sample_bytes_now, "heap profiling: the mean bytes between two samples in force, profile.sample_bytes raised while samples come faster than profile.max_samples a second (0: off)")

#define SEFER_STATS_VERSION 13

struct sefer_stats {
    uint32_t size;    /* set by the caller: sizeof(struct sefer_stats) */
    uint32_t version; /* set by sefer: SEFER_STATS_VERSION */
#define SEFER_STATS_MEMBER_(name, doc) uint64_t name;
    SEFER_STATS_FIELDS(SEFER_STATS_MEMBER_)
#undef SEFER_STATS_MEMBER_
};

/* Fills *out (at most `size` bytes of it; pass sizeof *out).  The figures are
 * summed from live per-thread counters without stopping other threads, so
 * figures that other threads are changing may be a few operations apart.
 * Returns 0, or -1 with errno EINVAL if out is NULL or size too small. */
SEFER_EXPORT int sefer_stats_get(struct sefer_stats *out, size_t size);

/* Phase measurements (docs/api.md, "Phases"): what a stretch of the run
 * took, process-wide.  sefer_phase_begin opens a phase (phases nest: one
 * process-wide stack, at most 16 deep; -1 with EBUSY past that);
 * sefer_phase_end closes the innermost and fills *out (at most out->size
 * bytes of it: set size first; out may be NULL); -1 with ENOENT if none is
 * open.  "block bytes" are bytes in allocated blocks (block sizes: not the
 * bytes requested, not RSS).  While a phase is open every allocation takes
 * sefer's generic paths, which count (docs/api.md gives the cost). */
#define SEFER_PHASE_VERSION 1
struct sefer_phase {
    uint32_t size;    /* set by the caller: sizeof(struct sefer_phase) */
    uint32_t version; /* set by sefer: SEFER_PHASE_VERSION */
    uint32_t depth;   /* 1 for an outermost phase */
    char name[64];    /* as given to sefer_phase_begin (cut to 63 bytes) */
    uint64_t duration_ns;
    uint64_t start_ms, end_ms; /* ms since the Unix epoch, on the events' clock (docs/introspection.md) */
    uint64_t block_bytes_entry, block_bytes_peak, block_bytes_exit;
    uint64_t block_bytes_peak_error; /* the peak is within this of the true peak of the sum */
    uint64_t committed_entry, committed_peak, committed_exit;
    uint64_t allocs, frees, reallocs, bytes_allocated; /* during the phase; bytes in blocks */
};
SEFER_EXPORT int sefer_phase_begin(const char *name);
SEFER_EXPORT int sefer_phase_end(struct sefer_phase *out);

/* Knobs by name ("segments.max", "decommit.policy", ...).  get writes the
 * value as text (the form a config file takes) and returns 0; -1 with errno
 * ENOENT for an unknown name, ERANGE if buf is too small.  set returns 0, or -1
 * with errno ENOENT (unknown), EINVAL (malformed or out of bounds) or EPERM
 * (the knob cannot change while the program runs). */
SEFER_EXPORT int sefer_config_get(const char *name, char *buf, size_t len);
SEFER_EXPORT int sefer_config_set(const char *name, const char *value);

/* Why the calling thread's last failed sefer_config_get/set failed, as one
 * line ("guard.level: cannot change while the program runs"); "" if none. */
SEFER_EXPORT const char *sefer_config_error(void);

/* Where a knob's current value came from: "default", "file", "env" or
 * "runtime"; NULL (errno ENOENT) for an unknown name. */
SEFER_EXPORT const char *sefer_config_source(const char *name);

/* ---- reliability: consistency check and test hooks (docs/reliability.md) ---- */

/* Walks sefer's structures (every segment and page, the segment map, the
 * lists and free lists of the calling thread's heap, of abandoned heaps and
 * of the fallback heap) and checks that they agree.  Returns 0 if they do;
 * otherwise the number of problems found, after one line on stderr naming
 * the first few.  Safe while other threads allocate; what it cannot check
 * in that case is listed in docs/reliability.md.  Slow: for tests and
 * debugging, not for production paths. */
SEFER_EXPORT int sefer_check(void);

#ifdef SEFER_FAULT_INJECTION
/* Only in a library built with fault injection (meson option
 * fault_injection): make the OS layer's system calls fail on purpose.
 * After sefer_test_fail_os(ops, nth, count), the nth call from now (1: the
 * next) of any operation in `ops`, and the count - 1 such calls after it,
 * fail as if the kernel had refused; count 0 disarms. */
#define SEFER_OS_MMAP 1u
#define SEFER_OS_MUNMAP 2u
#define SEFER_OS_MADVISE 4u
#define SEFER_OS_MPROTECT 8u
#define SEFER_OS_ALL 15u
SEFER_EXPORT void sefer_test_fail_os(unsigned ops, unsigned long nth, unsigned long count);
/* Calls of the operations in `ops` made to fail so far (cumulative). */
SEFER_EXPORT unsigned long sefer_test_os_failures(unsigned ops);
/* Only in a library built with fault injection, as the two above: the
 * test clock.  After sefer_test_clock_ms(ms) with ms > 0, sefer's clock (the
 * milliseconds decommit.delay, large_cache.ttl, guard.protect_rate and
 * the events' rate limits are measured in; not the events' wall-clock time
 * stamps) reads ms until the next call; 0 gives it
 * back the real monotonic clock.  A test advances it itself, so that what
 * depends on time does not depend on how fast the machine runs.  Keep it
 * from going backwards while sefer runs on it. */
SEFER_EXPORT void sefer_test_clock_ms(uint64_t ms);
/* Only in a library built with fault injection: memory.limit = auto reads
 * proc_cgroup instead of /proc/self/cgroup and looks for the cgroup tree
 * under root instead of /sys/fs/cgroup (NULL: the real one), from the next
 * time the limit is worked out (a change of memory.limit). */
SEFER_EXPORT void sefer_test_cgroup_files(const char *proc_cgroup, const char *root);
#endif

/* ---- introspection server (docs/introspection.md) ---- */

/* The HTTP server behind /segments, /heaps, /rings, /stats, /config,
 * /metrics and /healthz.  introspect.enabled starts it at program start;
 * these start and stop it explicitly.
 *
 * sefer_introspect_start listens on `listen` ("127.0.0.1:9090", "[::1]:0",
 * "127.0.0.1:9090+" for the first free port from 9090; NULL: the
 * introspect.listen knob) and returns the port it listens on, or -1 with
 * errno: EALREADY (already serving), EINVAL (malformed address), EACCES (a
 * non-loopback address without introspect.token), EADDRINUSE (port taken),
 * EPERM (a fork() child of a serving process), ENOSYS (built without the
 * server, or libmicrohttpd or cJSON cannot be loaded), or a socket error.
 * Nothing is written to stderr; sefer_introspect_error() tells why in one
 * line.  A program linked with libsefer.a starts it only this way (the
 * introspect.enabled constructor needs libsefer.so or --whole-archive). */
SEFER_EXPORT int sefer_introspect_start(const char *listen);
/* Stops the server (waits at most 2 s for the reply in progress); no-op if
 * none.  Also done at exit. */
SEFER_EXPORT void sefer_introspect_stop(void);
/* The port the server listens on, 0 if none (or if the program closed the
 * server's descriptors under it). */
SEFER_EXPORT int sefer_introspect_port(void);
/* Why the calling thread's last sefer_introspect_start failed. */
SEFER_EXPORT const char *sefer_introspect_error(void);

#ifdef __cplusplus
}
#endif
#endif /* SEFER_H */
