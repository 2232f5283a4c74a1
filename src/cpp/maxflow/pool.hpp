// A small pool of worker threads owned by the extension (no OpenMP, no TBB): a call hands it
// `jobs` numbered jobs and how many threads may run them (the calling thread is one of them).
#pragma once

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "control.hpp"

namespace maxflow {

class Pool {
  public:
    // Run fn(0..jobs-1) on up to `threads` threads (the caller included), each job once; returns
    // when all are done. One call at a time: a concurrent call (another Python thread; the GIL
    // is released while kernels run) runs its jobs on its own thread instead of waiting. With a
    // control, the caller keeps polling it (Ctrl-C, progress) while it waits for the helpers.
    void run(std::int64_t jobs, std::int64_t threads, const std::function<void(std::int64_t)>& fn,
             Control* ctl = nullptr) {
        if (threads > jobs) threads = jobs;
        std::unique_lock<std::mutex> call(call_mu_, std::try_to_lock);
        if (threads <= 1 || !call.owns_lock()) {
            for (std::int64_t j = 0; j < jobs; ++j) fn(j);
            return;
        }
        const std::int64_t helpers = threads - 1;
        while (std::int64_t(workers_.size()) < helpers) {
            const std::int64_t id = std::int64_t(workers_.size());
            workers_.emplace_back([this, id] { loop(id); });
        }
        {
            std::lock_guard<std::mutex> lock(mu_);
            fn_ = &fn;
            jobs_ = jobs;
            next_.store(0);
            helpers_ = helpers;
            open_ = true;
            error_ = nullptr;
            ++generation_;
        }
        wake_.notify_all();
        drain();
        // every job is taken: helpers that have not woken up yet stay out of this call
        std::unique_lock<std::mutex> lock(mu_);
        open_ = false;
        while (!done_.wait_for(lock, std::chrono::milliseconds(POLL_MS), [this] { return active_ == 0; }))
            if (ctl != nullptr) {
                lock.unlock();  // the poll takes the GIL: never while holding the pool's lock
                ctl->tick();
                lock.lock();
            }
        fn_ = nullptr;
        if (error_) std::rethrow_exception(error_);
    }

  private:
    void drain() {
        for (;;) {
            const std::int64_t j = next_.fetch_add(1);
            if (j >= jobs_) return;
            try {
                (*fn_)(j);
            } catch (...) {
                std::lock_guard<std::mutex> lock(mu_);
                if (!error_) error_ = std::current_exception();
                next_.store(jobs_);
            }
        }
    }

    void loop(std::int64_t id) {
        std::uint64_t seen = 0;
        for (;;) {
            {
                std::unique_lock<std::mutex> lock(mu_);
                wake_.wait(lock, [&] { return generation_ != seen && id < helpers_; });
                seen = generation_;
                if (!open_) continue;
                ++active_;
            }
            drain();
            std::lock_guard<std::mutex> lock(mu_);
            if (--active_ == 0) done_.notify_one();
        }
    }

    std::mutex call_mu_;  // one call at a time
    std::mutex mu_;
    std::condition_variable wake_, done_;
    std::vector<std::thread> workers_;
    const std::function<void(std::int64_t)>* fn_ = nullptr;
    std::int64_t jobs_ = 0, helpers_ = 0, active_ = 0;
    bool open_ = false;
    std::atomic<std::int64_t> next_{0};
    std::uint64_t generation_ = 0;
    std::exception_ptr error_;
};

// The process's pool, made on first use (with the GIL held, so by one thread at a time). A forked
// child (multiprocessing, data loaders) inherits no threads: it forgets the parent's pool (leaked
// on purpose: its threads do not exist there) and makes its own.
inline Pool*& pool_slot() {
    static Pool* pool = nullptr;
    return pool;
}

inline void forget_pool_in_child() { pool_slot() = nullptr; }

inline Pool& pool() {
    static const bool registered = (pthread_atfork(nullptr, nullptr, forget_pool_in_child), true);
    (void)registered;
    Pool*& p = pool_slot();
    if (p == nullptr) p = new Pool();
    return *p;
}

}  // namespace maxflow
