// Clang's thread-safety attributes, checked by the clang build `make test`
// makes (-Wthread-safety -Werror); with other compilers they are empty.
// GUARDED_BY(mu) on a member: read or written only with `mu` held.
// REQUIRES(mu) on a method: callers hold `mu` (the `...Locked` methods).
// EXCLUDES(mu): callers must not hold `mu` (the method takes it).
#pragma once

#if defined(__clang__)
#define SEEDD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SEEDD_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) SEEDD_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY SEEDD_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) SEEDD_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) SEEDD_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_AFTER(...) SEEDD_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) SEEDD_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define REQUIRES(...) SEEDD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) SEEDD_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) SEEDD_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) SEEDD_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) SEEDD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) SEEDD_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) SEEDD_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS SEEDD_THREAD_ANNOTATION(no_thread_safety_analysis)
