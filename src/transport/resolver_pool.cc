#include "transport/resolver_pool.h"

#include <algorithm>
#include <cassert>

#include "common/mutex.h"

namespace seedd {

ResolverPool::ResolverPool(size_t min_threads, size_t max_threads,
                           std::chrono::milliseconds stall_after,
                           std::chrono::milliseconds idle_timeout)
    : min_threads_(min_threads),
      max_threads_(max_threads),
      stall_after_(stall_after),
      idle_timeout_(idle_timeout) {
  assert(min_threads >= 1 && min_threads <= max_threads);
  MutexLock lock(mu_);
  for (size_t i = 0; i < min_threads_; ++i) Spawn();
  // An immediate pool grows in Submit: it has no stalls to watch for.
  if (!immediate()) supervisor_ = std::thread([this] { Supervise(); });
}

ResolverPool::Clock::time_point ResolverPool::StallTime() const {
  Clock::time_point since = tasks_.front().queued;
  if (!busy_since_.empty()) since = std::max(since, busy_since_.back());
  return since + stall_after_;
}

bool ResolverPool::Stalled(Clock::time_point now) const {
  return !tasks_.empty() && idle_ == 0 && busy_since_.size() == live_ && live_ < max_threads_ &&
         now >= StallTime();
}

void ResolverPool::Supervise() {
  MutexLock lock(mu_);
  while (!stop_) {
    if (tasks_.empty()) {
      supervisor_idle_ = true;
      supervisor_cv_.wait(lock, [this]() REQUIRES(mu_) { return stop_ || !tasks_.empty(); });
      supervisor_idle_ = false;
      continue;
    }
    // Tasks are waiting: look again when the oldest would count as stalled. A
    // time already past (the pool at its maximum, or a worker about to take
    // the task) is no reason to look again at once: that spun a core for as
    // long as the pool stayed full.
    Clock::time_point until = StallTime();
    const Clock::time_point now = Clock::now();
    if (until <= now) until = now + stall_after_;
    supervisor_cv_.wait_until(lock, until);
    if (!stop_ && Stalled(Clock::now())) Spawn();
  }
}

ResolverPool::~ResolverPool() { Shutdown(); }

void ResolverPool::Spawn() {
  // Join threads that timed out: they have left Work() or are about to.
  for (std::thread::id id : exited_) {
    auto it = std::find_if(threads_.begin(), threads_.end(),
                           [id](const std::thread& t) { return t.get_id() == id; });
    if (it != threads_.end()) {
      it->join();
      threads_.erase(it);
    }
  }
  exited_.clear();
  ++live_;
  threads_.emplace_back([this] { Work(); });
}

size_t ResolverPool::queued() const {
  MutexLock lock(mu_);
  return tasks_.size();
}

size_t ResolverPool::unserved() const {
  MutexLock lock(mu_);
  return tasks_.size() > Free() ? tasks_.size() - Free() : 0;
}

void ResolverPool::Submit(std::function<void()> task) {
  MutexLock lock(mu_);
  if (stop_) return;
  const Clock::time_point now = Clock::now();
  tasks_.push_back({std::move(task), now});
  if (immediate()) {
    if (idle_ > 0) cv_.notify_one();
    // A thread for every task that has none free or starting for it.
    if (tasks_.size() > Free() && live_ < max_threads_) Spawn();
    return;
  }
  if (idle_ >= tasks_.size()) {
    // An idle worker for every queued task (notified ones count until they wake).
    cv_.notify_one();
  } else if (Stalled(now)) {
    Spawn();
  } else if (supervisor_idle_) {
    // It grows the pool if this task waits too long. One that is timing a
    // task queued earlier looks again when that one would stall, which is no
    // later than this one would: waking it per task under load cost a thread
    // switch per request.
    supervisor_cv_.notify_one();
  }
}

void ResolverPool::Work() {
  MutexLock lock(mu_);
  for (;;) {
    while (tasks_.empty() && !stop_) {
      ++idle_;
      bool woke = cv_.wait_for(lock, idle_timeout_,
                               [this]() REQUIRES(mu_) { return !tasks_.empty() || stop_; });
      --idle_;
      if (!woke && live_ > min_threads_) {
        --live_;
        exited_.push_back(std::this_thread::get_id());
        return;
      }
    }
    if (tasks_.empty()) return;  // stopping, nothing left to run
    std::function<void()> task = std::move(tasks_.front().fn);
    tasks_.pop_front();
    auto busy = busy_since_.insert(busy_since_.end(), Clock::now());
    lock.Unlock();
    task();
    task = nullptr;  // release what the task holds before taking the lock again
    lock.Lock();
    busy_since_.erase(busy);
  }
}

void ResolverPool::Shutdown() {
  std::list<std::thread> threads;
  {
    MutexLock lock(mu_);
    if (stop_ && threads_.empty()) return;
    stop_ = true;
    threads.swap(threads_);
    cv_.notify_all();
    supervisor_cv_.notify_all();
  }
  if (supervisor_.joinable()) supervisor_.join();
  for (std::thread& t : threads) t.join();
}

size_t ResolverPool::threads() const {
  MutexLock lock(mu_);
  return live_;
}

}  // namespace seedd
