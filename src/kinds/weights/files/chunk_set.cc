#include "kinds/weights/files/chunk_set.h"

#include <algorithm>

#include "common/mutex.h"

namespace seedd {

namespace {

bool Wants(std::string_view wanted, size_t i) {
  return wanted.empty() || (static_cast<unsigned char>(wanted[i / 8]) & (0x80 >> (i % 8))) != 0;
}

}  // namespace

ChunkSet::ChunkSet(size_t size) : size_(size), words_(new std::atomic<uint64_t>[(size + 63) / 64]) {
  for (size_t i = 0; i < (size + 63) / 64; ++i) words_[i].store(0, std::memory_order_relaxed);
  log_.reserve(size);
}

void ChunkSet::Set(size_t i) {
  if (i >= size_) return;
  const uint64_t bit = uint64_t{1} << (i % 64);
  MutexLock lock(mu_);  // the log's order is the bits' order
  if ((words_[i / 64].fetch_or(bit, std::memory_order_release) & bit) != 0) return;
  log_.push_back(static_cast<uint32_t>(i));
  for (Waiter* w : waiters_) {
    if (Wants(w->wanted, i)) w->woken.notify_one();
  }
}

size_t ChunkSet::Count() const {
  MutexLock lock(mu_);
  return log_.size();
}

bool ChunkSet::Test(size_t i) const {
  return i < size_ && (words_[i / 64].load(std::memory_order_acquire) >> (i % 64)) & 1;
}

std::string ChunkSet::Bitmap(uint64_t* cursor) const {
  if (cursor != nullptr) {
    MutexLock lock(mu_);
    *cursor = log_.size();
  }
  std::string bits((size_ + 7) / 8, '\0');
  for (size_t i = 0; i < size_; ++i) {
    if (Test(i)) bits[i / 8] = static_cast<char>(bits[i / 8] | (0x80 >> (i % 8)));
  }
  return bits;
}

std::vector<uint32_t> ChunkSet::Since(uint64_t cursor, std::chrono::milliseconds wait,
                                      uint64_t* next, std::string_view wanted) const {
  if (!FitsBitmap(wanted)) wanted = {};
  MutexLock lock(mu_);
  if (cursor > log_.size()) cursor = 0;
  std::vector<uint32_t> found;
  auto collect = [&]() REQUIRES(mu_) {
    for (; cursor < log_.size(); ++cursor) {
      if (Wants(wanted, log_[cursor])) found.push_back(log_[cursor]);
    }
    return !found.empty();
  };
  if (!collect() && wait.count() > 0) {
    Waiter me{wanted, {}};
    waiters_.push_back(&me);
    const auto until = std::chrono::steady_clock::now() + wait;
    while (!collect() && me.woken.wait_until(lock, until) != std::cv_status::timeout) {
    }
    collect();
    waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &me));
  }
  *next = cursor;
  return found;
}

}  // namespace seedd
