// examples/demo/pipeline.hpp — the input side of the example training loops:
// a scratch directory, shard files on disk, a reader that can be made slow
// (cold page cache, throttled bandwidth), and the bounded queue a loader
// thread fills and the step thread drains.
//
//   stepscope_example::TempDir dir("mlp-data");
//   stepscope_example::ShardReader reader(dir.path() + "/shard-0.bin", {/*cold=*/true, 256 * 1024.0, 512});
//   reader.read_at(offset, buffer, bytes);       // real pread()s, paced to 256 KiB/s
//   stepscope_example::BoundedQueue<Batch> queue(4);
//   queue.push(std::move(batch));                 // blocks while 4 batches wait
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

namespace stepscope_example {

// A directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" + prefix + "-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::system_error(errno, std::generic_category(), "mkdtemp");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes `bytes` to a new file and flushes it to storage, so that dropping it
// from the page cache later really drops it (dirty pages cannot be dropped).
inline void write_file_synced(const std::string& path, const void* data, std::size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
  const char* p = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd, p + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw std::system_error(errno, std::generic_category(), "write " + path);
    }
    done += static_cast<std::size_t>(n);
  }
  ::fdatasync(fd);
  ::close(fd);
}

// How a reader gets its bytes.
struct ReadPolicy {
  // Drop the range from the page cache before reading it, so every read goes
  // to storage (a dataset larger than RAM, or a network file system).
  bool cold = false;
  // Bytes per second the storage delivers; 0 = as fast as the machine can.
  // Models a throttled volume / slow network mount: reads are real, the
  // pacing adds the time the slow device would take.
  double bytes_per_second = 0;
  // Size of each read() call: small requests are how a naive reader behaves.
  std::size_t request_bytes = 64 * 1024;
};

// Reads byte ranges of one file with real pread() calls under a ReadPolicy.
class ShardReader {
 public:
  ShardReader(const std::string& path, ReadPolicy policy) : policy_(policy) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
    paced_until_ = std::chrono::steady_clock::now();
  }
  ~ShardReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  // Reads exactly `bytes` at `offset` (throws on a short file or an error).
  void read_at(std::uint64_t offset, void* out, std::size_t bytes) {
    if (policy_.cold)
      (void)::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(bytes), POSIX_FADV_DONTNEED);
    char* dst = static_cast<char*>(out);
    std::size_t done = 0;
    const std::size_t request = policy_.request_bytes > 0 ? policy_.request_bytes : bytes;
    while (done < bytes) {
      const std::size_t want = std::min(request, bytes - done);
      const ssize_t n = ::pread(fd_, dst + done, want, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("short read");
      done += static_cast<std::size_t>(n);
      pace(static_cast<std::size_t>(n));
    }
  }

 private:
  // Token bucket: the device may deliver `bytes_per_second`; a reader ahead
  // of that waits until the device would have delivered its bytes.
  void pace(std::size_t bytes) {
    if (policy_.bytes_per_second <= 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (paced_until_ < now) paced_until_ = now;
    paced_until_ += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(static_cast<double>(bytes) / policy_.bytes_per_second));
    std::this_thread::sleep_until(paced_until_);
  }

  ReadPolicy policy_;
  int fd_ = -1;
  std::chrono::steady_clock::time_point paced_until_;
};

// A bounded multi-producer multi-consumer queue. push() blocks while full (the
// loader is ahead: back-pressure), pop() blocks while empty (the step waits
// for input). close() wakes everyone; pop() then drains what is left.
template <class T>
class BoundedQueue {
 public:
  explicit BoundedQueue(std::size_t capacity) : capacity_(capacity > 0 ? capacity : 1) {}

  bool push(T item) {
    std::unique_lock<std::mutex> lock(mutex_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }

  bool pop(T& out) {
    std::unique_lock<std::mutex> lock(mutex_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return false;
    out = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return true;
  }

  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> items_;
  std::size_t capacity_;
  bool closed_ = false;
};

}  // namespace stepscope_example
