// The measured choice of the runtime's per-participant queue and activation path (the worker
// pool's hand-off is bench_pool.cpp): P producers push over N participants, one consumer drains.
//
//  - mailbox: detail::Mailbox + detail::LockFreeBag, as the runtime uses them.
//  - vyukov: Vyukov's intrusive MPSC queue per participant, a flag and the same LockFreeBag.
//  - moodycamel_per_participant: a moodycamel queue per participant, tokens per producer.
//  - moodycamel_shared: one moodycamel queue of (participant, request) pairs.
//  - boost_per_participant / boost_shared: boost::lockfree::queue, per participant or shared.
// A queue paired with a flag: seq_cst on both sides of both store-then-load pairs (mailbox.hpp).
// The counter rescues must be 0.
//
// Run: cmake --build build/release --target bench_queues
//      build/release/bench/bench_queues --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true
// How it measures, and why: docs/performance.md#how-bench_queues-measures
#include <benchmark/benchmark.h>
#include <concurrentqueue/concurrentqueue.h>
#include <malloc.h>
#include <boost/lockfree/queue.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "creditloop/participant.hpp"
#include "creditloop/request.hpp"
#include "creditloop/runtime.hpp"
#include "creditloop/ticket.hpp"
#include "internal/lock_free_bag.hpp"
#include "internal/mailbox.hpp"
#include "internal/queue_link.hpp"
#include "internal/spin.hpp"
#include "vyukov_queue.hpp"

namespace {

using creditloop::RequestHook;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kItems = 200'000;
constexpr std::size_t kDrainBulk = 64;
constexpr auto kRescueAfter = std::chrono::milliseconds(200);

using creditloop::detail::cpu_relax;

// Live heap bytes of the queues under test (malloc_usable_size: moodycamel's free() gets no size).
std::atomic<std::int64_t> g_heap_bytes{0};

void* counted_malloc(std::size_t size) {
  void* p = std::malloc(size);
  if (p != nullptr) {
    g_heap_bytes.fetch_add(static_cast<std::int64_t>(malloc_usable_size(p)),
                           std::memory_order_relaxed);
  }
  return p;
}

void counted_free(void* p) {
  if (p == nullptr) return;
  g_heap_bytes.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)),
                         std::memory_order_relaxed);
  std::free(p);
}

// The default traits but for the counting heap, and no implicit-producer hash: every enqueue here
// has a token, and the hash's 32 inline entries would only inflate each queue object.
struct CountingTraits : moodycamel::ConcurrentQueueDefaultTraits {
  static constexpr std::size_t INITIAL_IMPLICIT_PRODUCER_HASH_SIZE = 0;
  static void* malloc(std::size_t size) { return counted_malloc(size); }
  static void free(void* p) { counted_free(p); }
};

template <class T>
struct CountingAllocator {
  using value_type = T;
  CountingAllocator() noexcept = default;
  template <class U>
  explicit CountingAllocator(const CountingAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    g_heap_bytes.fetch_add(static_cast<std::int64_t>(n * sizeof(T)), std::memory_order_relaxed);
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    g_heap_bytes.fetch_sub(static_cast<std::int64_t>(n * sizeof(T)), std::memory_order_relaxed);
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  friend bool operator==(const CountingAllocator&, const CountingAllocator<U>&) noexcept {
    return true;
  }
};

struct Item : RequestHook {
  std::uint32_t participant = 0;
  std::uint32_t seq = 0;
};

struct Pair {
  std::uint32_t participant = 0;
  Item* item = nullptr;
};

// What the consumer does with each request: the dispatcher touches per-participant state for every
// request it moves, and so does this.
struct Tally {
  explicit Tally(std::size_t participants) : per_participant(participants, 0) {}
  void operator()(std::uint32_t participant, const Item& item) noexcept {
    ++per_participant[participant];
    seq_sum += item.seq;
    ++count;
  }
  // Whether `runs` runs each delivered every item once: `expected` of them to each participant.
  [[nodiscard]] bool exact(std::uint64_t runs, const std::vector<std::uint64_t>& expected) const {
    bool exact =
        count == runs * kItems && seq_sum == runs * (std::uint64_t{kItems} * (kItems - 1) / 2);
    for (std::size_t i = 0; i < per_participant.size(); ++i) {
      exact = exact && per_participant[i] == runs * expected[i];
    }
    return exact;
  }
  std::vector<std::uint64_t> per_participant;
  std::uint64_t seq_sum = 0;
  std::size_t count = 0;
};

// ---- mailbox: the runtime's own -----------------------------------------------------------------

class MailboxDesign {
 public:
  using Mailbox = creditloop::detail::Mailbox<
      RequestHook, std::atomic,
      creditloop::detail::MemberLink<RequestHook, &RequestHook::next_in_queue>>;

  MailboxDesign(std::size_t participants, unsigned /*producers*/)
      : boxes_(new Mailbox[participants]), participants_(participants) {
    for (std::size_t i = 0; i < participants; ++i) {
      boxes_[i].place = static_cast<std::uint32_t>(i);
      boxes_[i].open(kGeneration);
    }
  }

  void push(unsigned /*producer*/, Item& item) noexcept {
    Mailbox& box = boxes_[item.participant];
    if (box.submit(item, kGeneration) == Mailbox::Submit::queued_and_listed) {
      activations_.push(box);
    }
  }

  template <class Sink>
  std::size_t drain(Sink& sink) {
    std::size_t n = 0;
    activations_.drain(
        [&](Mailbox& box) { n += deliver(box.place, box.take_listed(true, kGeneration), sink); });
    return n;
  }

  // Taking an inbox that may still be listed is harmless: the listed entry later finds it empty.
  template <class Sink>
  std::size_t sweep(Sink& sink) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < participants_; ++i) {
      n += deliver(boxes_[i].place, boxes_[i].inbox.take(kGeneration), sink);
    }
    return n;
  }

  [[nodiscard]] std::size_t bytes() const { return participants_ * sizeof(Mailbox); }

 private:
  static constexpr std::uint32_t kGeneration = 1;

  template <class Sink>
  static std::size_t deliver(std::uint32_t place, RequestHook* oldest, Sink& sink) {
    std::size_t n = 0;
    for (RequestHook* r = oldest; r != nullptr; ++n) {
      RequestHook* const next = r->next_in_queue;
      sink(place, static_cast<Item&>(*r));
      r = next;
    }
    return n;
  }

  std::unique_ptr<Mailbox[]> boxes_;
  std::size_t participants_;
  creditloop::detail::LockFreeBag<Mailbox, std::atomic, &Mailbox::next_listed> activations_;
};

// ---- the activation path shared by the per-participant contenders -------------------------------

// A flag per queue and the runtime's LockFreeBag: the consumer visits only queues that have work.
// kSeqCstEnqueue: the queue's enqueue publishes with a seq_cst read-modify-write, which orders it
// before a seq_cst read of the flag with no fence (Vyukov's exchange); a library queue's enqueue
// promises no such thing, so its producer pays a seq_cst fence.
template <class Queue, bool kSeqCstEnqueue>
class Activations {
 public:
  // Producer, after its enqueue.
  void after_enqueue(Queue& q) noexcept {
    bool listed = false;
    if constexpr (kSeqCstEnqueue) {
      listed = q.listed.load(std::memory_order_seq_cst);
    } else {
      std::atomic_thread_fence(std::memory_order_seq_cst);
      listed = q.listed.load(std::memory_order_relaxed);
    }
    // acq_rel: the exchange only elects the one producer that lists the queue.
    if (!listed && !q.listed.exchange(true, std::memory_order_acq_rel)) bag_.push(q);
  }

  // Consumer: f(queue, retry) drains the queue and returns how many it took; it puts the queue on
  // `retry` when a producer is half-way through a push (swapped in as the head, predecessor not yet
  // linked). A queue on `retry` is drained again on the next call without touching its flag: the
  // flag belongs to the bag entry.
  template <class F>
  std::size_t drain(F&& f) {
    std::size_t n = 0;
    retrying_.swap(retry_);
    for (Queue* q : retrying_) n += f(*q, retry_);
    retrying_.clear();
    bag_.drain([&](Queue& q) {
      // relaxed and a seq_cst fence: clear, then look, against either kind of producer.
      q.listed.store(false, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      n += f(q, retry_);
    });
    return n;
  }

 private:
  creditloop::detail::LockFreeBag<Queue, std::atomic, &Queue::next_listed> bag_;
  std::vector<Queue*> retry_;
  std::vector<Queue*> retrying_;
};

// ---- vyukov: an intrusive MPSC queue per participant (a contender only) -------------------------

using creditloop::bench::VyukovQueue;

class VyukovDesign {
 public:
  VyukovDesign(std::size_t participants, unsigned /*producers*/)
      : queues_(new VyukovQueue[participants]), participants_(participants) {
    for (std::size_t i = 0; i < participants; ++i) queues_[i].place = static_cast<std::uint32_t>(i);
  }

  void push(unsigned /*producer*/, Item& item) noexcept {
    VyukovQueue& q = queues_[item.participant];
    q.push(item);
    activations_.after_enqueue(q);
  }

  template <class Sink>
  std::size_t drain(Sink& sink) {
    return activations_.drain(
        [&](VyukovQueue& q, std::vector<VyukovQueue*>& retry) { return take(q, retry, sink); });
  }

  template <class Sink>
  std::size_t sweep(Sink& sink) {
    std::vector<VyukovQueue*> ignored;
    std::size_t n = 0;
    for (std::size_t i = 0; i < participants_; ++i) n += take(queues_[i], ignored, sink);
    return n;
  }

  [[nodiscard]] std::size_t bytes() const { return participants_ * sizeof(VyukovQueue); }

 private:
  template <class Sink>
  static std::size_t take(VyukovQueue& q, std::vector<VyukovQueue*>& retry, Sink& sink) {
    std::size_t n = 0;
    for (;;) {
      VyukovQueue::Pop outcome{};
      RequestHook* const r = q.pop(outcome);
      if (outcome == VyukovQueue::Pop::item) {
        sink(q.place, static_cast<Item&>(*r));
        ++n;
        continue;
      }
      if (outcome == VyukovQueue::Pop::busy) retry.push_back(&q);
      return n;
    }
  }

  std::unique_ptr<VyukovQueue[]> queues_;
  std::size_t participants_;
  Activations<VyukovQueue, true> activations_;
};

// ---- moodycamel, one queue per participant ------------------------------------------------------

struct alignas(64) MoodyQueue {
  // No initial blocks: each producer token allocates what it uses, so the count is what is needed.
  moodycamel::ConcurrentQueue<Item*, CountingTraits> queue{0};
  std::atomic<bool> listed{false};
  std::atomic<MoodyQueue*> next_listed{nullptr};
  std::uint32_t place = 0;
};

class MoodyPerParticipantDesign {
 public:
  using Queue = moodycamel::ConcurrentQueue<Item*, CountingTraits>;

  MoodyPerParticipantDesign(std::size_t participants, unsigned producers)
      : queues_(new MoodyQueue[participants]),
        participants_(participants),
        producers_(producers),
        tokens_(static_cast<std::size_t>(producers)) {
    consumer_tokens_.reserve(participants);
    for (std::size_t i = 0; i < participants; ++i) {
      queues_[i].place = static_cast<std::uint32_t>(i);
      consumer_tokens_.emplace_back(queues_[i].queue);
    }
    for (auto& row : tokens_) {
      row.reserve(participants);
      for (std::size_t i = 0; i < participants; ++i) row.emplace_back(queues_[i].queue);
    }
  }

  void push(unsigned producer, Item& item) {
    MoodyQueue& q = queues_[item.participant];
    q.queue.enqueue(tokens_[producer][item.participant], &item);
    activations_.after_enqueue(q);
  }

  template <class Sink>
  std::size_t drain(Sink& sink) {
    return activations_.drain(
        [&](MoodyQueue& q, std::vector<MoodyQueue*>& /*retry*/) { return take(q, sink); });
  }

  template <class Sink>
  std::size_t sweep(Sink& sink) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < participants_; ++i) n += take(queues_[i], sink);
    return n;
  }

  [[nodiscard]] std::size_t bytes() const {
    return participants_ * (sizeof(MoodyQueue) + sizeof(moodycamel::ConsumerToken) +
                            producers_ * sizeof(moodycamel::ProducerToken));
  }

 private:
  template <class Sink>
  std::size_t take(MoodyQueue& q, Sink& sink) {
    std::array<Item*, kDrainBulk> batch;
    std::size_t n = 0;
    for (;;) {
      const std::size_t got =
          q.queue.try_dequeue_bulk(consumer_tokens_[q.place], batch.begin(), batch.size());
      for (std::size_t i = 0; i < got; ++i) sink(q.place, *batch[i]);
      n += got;
      if (got < batch.size()) return n;
    }
  }

  std::unique_ptr<MoodyQueue[]> queues_;
  std::size_t participants_;
  std::size_t producers_;
  std::vector<std::vector<moodycamel::ProducerToken>> tokens_;  // [producer][participant]
  std::vector<moodycamel::ConsumerToken> consumer_tokens_;
  Activations<MoodyQueue, false> activations_;
};

// ---- moodycamel, one shared queue of pairs ------------------------------------------------------

class MoodySharedDesign {
 public:
  MoodySharedDesign(std::size_t /*participants*/, unsigned producers) : consumer_token_(queue_) {
    tokens_.reserve(producers);
    for (unsigned p = 0; p < producers; ++p) tokens_.emplace_back(queue_);
  }

  void push(unsigned producer, Item& item) {
    queue_.enqueue(tokens_[producer], Pair{item.participant, &item});
  }

  template <class Sink>
  std::size_t drain(Sink& sink) {
    std::array<Pair, kDrainBulk> batch;
    std::size_t n = 0;
    for (;;) {
      const std::size_t got = queue_.try_dequeue_bulk(consumer_token_, batch.begin(), batch.size());
      for (std::size_t i = 0; i < got; ++i) sink(batch[i].participant, *batch[i].item);
      n += got;
      if (got < batch.size()) return n;
    }
  }

  template <class Sink>
  std::size_t sweep(Sink& sink) {
    (void)sink;
    return 0;  // nothing to lose: there is no activation
  }

  [[nodiscard]] std::size_t bytes() const {
    return sizeof(queue_) + sizeof(consumer_token_) +
           tokens_.size() * sizeof(moodycamel::ProducerToken);
  }

 private:
  moodycamel::ConcurrentQueue<Pair, CountingTraits> queue_;
  std::vector<moodycamel::ProducerToken> tokens_;
  moodycamel::ConsumerToken consumer_token_;
};

// ---- boost::lockfree::queue ---------------------------------------------------------------------

template <class T>
using BoostQueue = boost::lockfree::queue<T, boost::lockfree::allocator<CountingAllocator<T>>>;

struct BoostSlot {
  // Nodes come from the queue's free list, refilled from the allocator on demand; they are never
  // returned to the heap while the queue lives.
  BoostQueue<Item*> queue{0};
  std::atomic<bool> listed{false};
  std::atomic<BoostSlot*> next_listed{nullptr};
  std::uint32_t place = 0;
};

class BoostPerParticipantDesign {
 public:
  BoostPerParticipantDesign(std::size_t participants, unsigned /*producers*/)
      : queues_(new BoostSlot[participants]), participants_(participants) {
    for (std::size_t i = 0; i < participants; ++i) queues_[i].place = static_cast<std::uint32_t>(i);
  }

  void push(unsigned /*producer*/, Item& item) {
    BoostSlot& q = queues_[item.participant];
    while (!q.queue.push(&item)) {
    }
    activations_.after_enqueue(q);
  }

  template <class Sink>
  std::size_t drain(Sink& sink) {
    return activations_.drain(
        [&](BoostSlot& q, std::vector<BoostSlot*>& /*retry*/) { return take(q, sink); });
  }

  template <class Sink>
  std::size_t sweep(Sink& sink) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < participants_; ++i) n += take(queues_[i], sink);
    return n;
  }

  [[nodiscard]] std::size_t bytes() const { return participants_ * sizeof(BoostSlot); }

 private:
  template <class Sink>
  static std::size_t take(BoostSlot& q, Sink& sink) {
    std::size_t n = 0;
    Item* item = nullptr;
    while (q.queue.pop(item)) {
      sink(q.place, *item);
      ++n;
    }
    return n;
  }

  std::unique_ptr<BoostSlot[]> queues_;
  std::size_t participants_;
  Activations<BoostSlot, false> activations_;
};

class BoostSharedDesign {
 public:
  BoostSharedDesign(std::size_t /*participants*/, unsigned /*producers*/) : queue_(1024) {}

  void push(unsigned /*producer*/, Item& item) {
    while (!queue_.push(Pair{item.participant, &item})) {
    }
  }

  template <class Sink>
  std::size_t drain(Sink& sink) {
    std::size_t n = 0;
    Pair pair;
    while (queue_.pop(pair)) {
      sink(pair.participant, *pair.item);
      ++n;
    }
    return n;
  }

  template <class Sink>
  std::size_t sweep(Sink& sink) {
    (void)sink;
    return 0;
  }

  [[nodiscard]] std::size_t bytes() const { return sizeof(queue_); }

 private:
  BoostQueue<Pair> queue_;
};

// ---- the queue benchmark ------------------------------------------------------------------------

// Gives each producer an equal run of the items, to participants in turn from its own starting
// point; returns how many each participant is to get.
std::vector<std::uint64_t> deal_items(std::vector<Item>& items, unsigned producers,
                                      std::size_t participants) {
  const std::size_t per_producer = kItems / producers;
  std::vector<std::uint64_t> expected(participants, 0);
  for (unsigned p = 0; p < producers; ++p) {
    const std::size_t start = p * participants / producers;
    for (std::size_t i = 0; i < per_producer; ++i) {
      Item& item = items[p * per_producer + i];
      item.participant = static_cast<std::uint32_t>((start + i) % participants);
      item.seq = static_cast<std::uint32_t>(p * per_producer + i);
      ++expected[item.participant];
    }
  }
  return expected;
}

template <class Design>
void BM_Queue(benchmark::State& state) {
  const auto producers = static_cast<unsigned>(state.range(0));
  const auto participants = static_cast<std::size_t>(state.range(1));
  const std::size_t per_producer = kItems / producers;

  std::vector<Item> items(kItems);
  const std::vector<std::uint64_t> expected = deal_items(items, producers, participants);

  // Relaxed: only this thread allocates between the two reads.
  const std::int64_t heap_before = g_heap_bytes.load(std::memory_order_relaxed);
  auto design = std::make_unique<Design>(participants, producers);
  Tally tally(participants);
  std::size_t rescues = 0;

  for (auto _ : state) {
    std::atomic<unsigned> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    threads.reserve(producers);
    for (unsigned p = 0; p < producers; ++p) {
      threads.emplace_back([&, p] {
        ready.fetch_add(1, std::memory_order_relaxed);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        for (std::size_t i = p * per_producer; i < (p + 1) * per_producer; ++i) {
          design->push(p, items[i]);
        }
      });
    }
    while (ready.load(std::memory_order_relaxed) < producers) std::this_thread::yield();

    const auto start = Clock::now();
    go.store(true, std::memory_order_release);
    std::size_t consumed = 0;
    unsigned idle = 0;
    auto last_progress = start;
    while (consumed < kItems) {
      const std::size_t got = design->drain(tally);
      if (got > 0) {
        consumed += got;
        idle = 0;
        continue;
      }
      if (++idle < 64) {
        cpu_relax();
        continue;
      }
      std::this_thread::yield();
      if ((idle & 1023) != 0) continue;
      const auto now = Clock::now();
      if (idle == 1024) last_progress = now;
      if (now - last_progress < kRescueAfter) continue;
      const std::size_t found = design->sweep(tally);
      if (found > 0) ++rescues;
      consumed += found;
      last_progress = now;
    }
    const auto stop = Clock::now();
    for (std::thread& t : threads) t.join();
    state.SetIterationTime(std::chrono::duration<double>(stop - start).count());
  }

  const auto runs = static_cast<std::uint64_t>(state.iterations());
  if (!tally.exact(runs, expected)) state.SkipWithError("requests lost or duplicated");

  const auto heap = static_cast<double>(g_heap_bytes.load(std::memory_order_relaxed) - heap_before);
  state.counters["bytes_per_participant"] =
      (heap + static_cast<double>(design->bytes())) / static_cast<double>(participants);
  state.counters["rescues"] = static_cast<double>(rescues);
  state.SetItemsProcessed(static_cast<std::int64_t>(runs * kItems));
}

void QueueArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"producers", "participants"});
  for (const int participants : {10, 10'000}) {
    for (const int producers : {1, 2, 4}) b->Args({producers, participants});
  }
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_Queue<MailboxDesign>)->Name("BM_Queue/mailbox")->Apply(QueueArgs);
BENCHMARK(BM_Queue<VyukovDesign>)->Name("BM_Queue/vyukov")->Apply(QueueArgs);
BENCHMARK(BM_Queue<MoodyPerParticipantDesign>)
    ->Name("BM_Queue/moodycamel_per_participant")
    ->Apply(QueueArgs);
BENCHMARK(BM_Queue<MoodySharedDesign>)->Name("BM_Queue/moodycamel_shared")->Apply(QueueArgs);
BENCHMARK(BM_Queue<BoostPerParticipantDesign>)
    ->Name("BM_Queue/boost_per_participant")
    ->Apply(QueueArgs);
BENCHMARK(BM_Queue<BoostSharedDesign>)->Name("BM_Queue/boost_shared")->Apply(QueueArgs);

}  // namespace

BENCHMARK_MAIN();
