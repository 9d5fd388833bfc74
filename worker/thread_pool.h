// A fixed pool of worker-side threads for the pipeline's per-item stages
// (worker/pipeline_stages.h).
//
// Owns: its std::threads (started in the constructor, joined in the destructor after the queue
// ran dry) and a FIFO of tasks. Submit is called by the compute thread; tasks run on the pool's
// threads. A task must not throw (PipelineStages catches inside each task and records a Status).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace torchfarm::worker {

class ThreadPool {
 public:
  // `on_start` runs once on each thread before its first task (thread-local set-up).
  ThreadPool(int threads, const std::function<void()>& on_start) {
    threads_.reserve(static_cast<size_t>(threads));
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this, on_start] {
        if (on_start) on_start();
        Work();
      });
    }
  }
  // Runs what is queued, then joins.
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
  }

  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void Work() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping, and nothing left to run
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;  // guarded by mutex_
  bool stopping_ = false;                    // guarded by mutex_
  std::vector<std::thread> threads_;
};

}  // namespace torchfarm::worker
