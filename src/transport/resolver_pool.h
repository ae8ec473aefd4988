// ResolverPool: the threads that run request handlers off the event loop.
//
// Elastic: it keeps `min_threads` warm. When a task has waited `stall_after`
// while every thread has been inside its current task for at least as long (slow
// handlers hold them), another thread starts, up to `max_threads`; so slow
// handlers delay the next request by about that much at most, while a busy CPU
// alone never grows the pool. Threads above the minimum exit after `idle_timeout` without work. Few
// warm threads keep the hand-off cheap: a busy thread picks up the next task without a wake-up, and
// short tasks never grow the pool.
//
// With `stall_after` zero, a task that finds no thread free starts one at once (up to
// `max_threads`): for tasks that hold their thread by design, such as a data connection for its
// whole life. Grown by stalls, such a pool starts one thread per `stall_after` for a burst of
// such tasks (80 connections: the last would wait 0.4 s), and a server counted those waiting
// meanwhile against its limit of connections waiting for a thread.
//
// Thread safety: Submit may be called from any thread; Shutdown from one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace seedd {

class ResolverPool {
 public:
  // REQUIRES: 1 <= min_threads <= max_threads.
  ResolverPool(size_t min_threads, size_t max_threads,
               std::chrono::milliseconds stall_after = std::chrono::milliseconds(5),
               std::chrono::milliseconds idle_timeout = std::chrono::seconds(10));
  ResolverPool(const ResolverPool&) = delete;
  ResolverPool& operator=(const ResolverPool&) = delete;
  ~ResolverPool();  // Shutdown()

  // Queues `task`. After Shutdown the task is dropped.
  void Submit(std::function<void()> task);
  // Runs every queued task, then joins every thread. Idempotent.
  void Shutdown();

  size_t threads() const;
  // Tasks queued and not started yet.
  size_t queued() const;
  // Of those, the ones no thread is free or starting for: they wait for a
  // running task to end (or, growing by stalls, for the pool to grow).
  size_t unserved() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Task {
    std::function<void()> fn;
    Clock::time_point queued;
  };

  void Spawn() REQUIRES(mu_);
  // When the pool counts as stalled if nothing changes (see the class comment).
  Clock::time_point StallTime() const REQUIRES(mu_);  // REQUIRES: !tasks_.empty()
  bool Stalled(Clock::time_point now) const REQUIRES(mu_);
  // Threads not inside a task: idle, woken, or starting.
  size_t Free() const REQUIRES(mu_) { return live_ - busy_since_.size(); }
  // Threads start at once for tasks that find none free (stall_after zero).
  bool immediate() const { return stall_after_.count() == 0; }
  void Work();
  void Supervise();

  const size_t min_threads_;
  const size_t max_threads_;
  const std::chrono::milliseconds stall_after_;
  const std::chrono::milliseconds idle_timeout_;
  mutable Mutex mu_;
  std::condition_variable cv_;             // workers wait here
  std::condition_variable supervisor_cv_;  // the supervisor waits here
  std::deque<Task> tasks_ GUARDED_BY(mu_);
  std::list<std::thread> threads_ GUARDED_BY(mu_);
  std::vector<std::thread::id> exited_ GUARDED_BY(mu_);      // to join
  std::list<Clock::time_point> busy_since_ GUARDED_BY(mu_);  // task starts, oldest first
  size_t live_ GUARDED_BY(mu_) = 0;
  size_t idle_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  bool supervisor_idle_ GUARDED_BY(mu_) = false;  // waiting for a task
  std::thread supervisor_;
};

}  // namespace seedd
