// stress/event_log.hpp: the observer's record of every core input, from the dispatcher thread to
// the replay thread.
//
// One writer (the dispatcher, through the observer) appends fixed-size events to chunks of 4096;
// one reader (the replay thread) takes each chunk once it is full, and the last one once the
// writer has finished. Appending is a store into the current chunk; a full chunk costs one link,
// one counter increment and a wake-up of the reader if it sleeps. Chunks the reader is done with
// are kept for the writer to reuse, so a steady run allocates nothing.
//
// Nobody ever waits for the reader: the monitor compares appended() with what the replay has
// read and, when the replay falls too far behind, has the observer stop appending (recorder.hpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common.hpp"

namespace creditloop::stress {

enum class EventKind : std::uint8_t {
  add,         // place, generation; value: name index; x: plan; y: shares
  remove,      // place, generation
  replan,      // place, generation; x: plan; y: shares
  scale,       // place, generation; x: millionths of the plan
  submit,      // place, generation; value: request id
  begin_turn,  // out: the turn class, or kNoClass
  visit,       // place, generation; x, y: ticket; value: request id; out, turn
  visit_none,  // the turn is over
  dispatch,    // a batch: value: the span size asked for; x: the dispatches, whose visits follow
  end_turn,    // no room
  complete,    // x, y: ticket; value: cost in nano-credits
  take_all,    // shutdown took every queued request back
};

inline constexpr std::uint8_t kNoClass = 0xff;

struct Event {
  Nanos now = 0;
  std::uint64_t value = 0;
  std::uint32_t place = 0;
  std::uint32_t generation = 0;
  std::uint32_t x = 0;
  std::uint32_t y = 0;
  EventKind kind = EventKind::end_turn;
  std::uint8_t out = 0;
  std::uint8_t turn = 0;
};

class EventLog {
 public:
  static constexpr std::size_t kChunkEvents = 4096;
  struct Chunk {
    Event events[kChunkEvents];
    std::atomic<Chunk*> next{nullptr};
  };

  EventLog() : head_(new Chunk), read_(head_) {}
  ~EventLog() {
    for (Chunk* c = read_; c != nullptr;) {
      Chunk* const next = c->next.load(std::memory_order_relaxed);
      delete c;
      c = next;
    }
    for (Chunk* c : spare_) delete c;
  }
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // ---- the writer ----
  void append(const Event& e) {
    if (pos_ == kChunkEvents) roll();
    head_->events[pos_++] = e;
    appended_.store(appended_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  /// Any thread: events appended so far (a gauge for the monitor).
  [[nodiscard]] std::uint64_t appended() const noexcept {
    return appended_.load(std::memory_order_relaxed);
  }
  /// No more events. Called once the dispatcher has exited, by the thread that joined it.
  void finish() {
    last_count_ = pos_;
    // release: publishes last_count_ and the last chunk's events to the reader.
    finished_.store(true, std::memory_order_release);
    published_.fetch_add(1, std::memory_order_release);
    published_.notify_all();
  }

  // ---- the reader ----
  /// Calls f(const Event&) for every event, in order, sleeping while none is published, until
  /// the writer has finished and everything was read, or f returns false.
  template <class F>
  void read_all(F&& f) {
    for (;;) {
      // acquire: pairs with the release increment in roll() and finish().
      const std::uint64_t seen = published_.load(std::memory_order_acquire);
      if (Chunk* const next = read_->next.load(std::memory_order_acquire)) {
        for (const Event& e : read_->events) {
          if (!f(e)) return;
        }
        recycle(read_);
        read_ = next;
        continue;
      }
      if (finished_.load(std::memory_order_acquire)) {
        if (read_->next.load(std::memory_order_acquire) != nullptr) continue;
        for (std::size_t i = 0; i < last_count_; ++i) {
          if (!f(read_->events[i])) return;
        }
        return;
      }
      published_.wait(seen, std::memory_order_acquire);
    }
  }

 private:
  void roll() {
    Chunk* fresh = nullptr;
    {
      std::lock_guard lock(spare_mutex_);
      if (!spare_.empty()) {
        fresh = spare_.back();
        spare_.pop_back();
      }
    }
    if (fresh == nullptr) fresh = new Chunk;
    fresh->next.store(nullptr, std::memory_order_relaxed);
    // release: the reader that sees the link sees the full chunk behind it.
    head_->next.store(fresh, std::memory_order_release);
    head_ = fresh;
    pos_ = 0;
    published_.fetch_add(1, std::memory_order_release);
    published_.notify_all();
  }
  void recycle(Chunk* c) {
    std::lock_guard lock(spare_mutex_);
    if (spare_.size() < 64) {
      spare_.push_back(c);
      return;
    }
    delete c;
  }

  // Writer only.
  Chunk* head_;
  std::size_t pos_ = 0;
  std::atomic<std::uint64_t> appended_{0};  // one writer
  std::size_t last_count_ = 0;              // published by finished_
  // Reader only.
  Chunk* read_;
  // Shared.
  std::atomic<std::uint64_t> published_{0};
  std::atomic<bool> finished_{false};
  std::mutex spare_mutex_;
  std::vector<Chunk*> spare_;
};

}  // namespace creditloop::stress
