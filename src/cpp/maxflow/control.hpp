// Stopping a long call and reporting its progress: a Control per call, shared by its threads.
// The kernels call step() between problems (never inside one, so a stop leaves every workspace
// as a finished problem leaves it); the calling thread then runs `poll` every POLL_MS at most
// (the bindings' poll takes the GIL, checks for Ctrl-C (PyErr_CheckSignals) and moves the
// progress bar), and every thread stops at its next step once `stop` is set. No value depends
// on it: a call that is not stopped computes what it computed before.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

namespace maxflow {

// How often (milliseconds) the calling thread polls: Ctrl-C stops a call within about this much
// plus one problem (a problem of 12 layers x 2,048 tokens: ~10 ms).
constexpr int POLL_MS = 50;

struct Control {
    std::atomic<bool> stop{false};
    std::atomic<std::int64_t> done{0};  // work finished, in the plan's units (~ arc visits)
    std::thread::id caller = std::this_thread::get_id();
    std::function<void()> poll;  // run on the calling thread; sets `stop` to end the call
    std::chrono::steady_clock::time_point next = std::chrono::steady_clock::now() + std::chrono::milliseconds(POLL_MS);

    // Poll now if it is time and this is the calling thread.
    void tick() {
        if (!poll || std::this_thread::get_id() != caller) return;
        const auto now = std::chrono::steady_clock::now();
        if (now < next) return;
        next = now + std::chrono::milliseconds(POLL_MS);
        poll();
    }
    // `units` of work finished; true when the call must stop.
    bool step(std::int64_t units) {
        if (units > 0) done.fetch_add(units, std::memory_order_relaxed);
        tick();
        return stop.load(std::memory_order_relaxed);
    }
};

// step() of an optional control: false (go on) without one.
inline bool halted(Control* ctl, std::int64_t units) { return ctl != nullptr && ctl->step(units); }

}  // namespace maxflow
