// A stand-in for a torch::data loader in the README's example: a range of
// batches whose next batch is produced in operator++ (here: 2 ms asleep, as
// if decoding on this thread), like `*torch::data::make_data_loader(...)`.
#pragma once

#include <chrono>
#include <thread>
#include <vector>

class SlowLoader {
 public:
  SlowLoader(int batches, std::chrono::microseconds per_batch) : batches_(batches), per_batch_(per_batch) {}
  class iterator {
   public:
    iterator(const SlowLoader* loader, int index) : loader_(loader), index_(index) { fetch(); }
    std::vector<float>& operator*() { return batch_; }
    iterator& operator++() {
      ++index_;
      fetch();
      return *this;
    }
    bool operator!=(const iterator& other) const { return index_ != other.index_; }

   private:
    void fetch() {
      if (index_ >= loader_->batches_) return;
      std::this_thread::sleep_for(loader_->per_batch_);
      batch_.assign(64, 0.01f * static_cast<float>(index_ % 7));
    }
    const SlowLoader* loader_;
    int index_;
    std::vector<float> batch_;
  };
  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, batches_); }

 private:
  int batches_;
  std::chrono::microseconds per_batch_;
};
