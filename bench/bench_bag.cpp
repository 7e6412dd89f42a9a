// The runtime's list push (internal/lock_free_bag.hpp, one compare-and-swap) against the push it
// replaced (one exchange, then the link stored after it: wait-free, but half-made in between),
// side by side in one run. PRODUCERS threads push nodes of their own as fast as the consumer gives
// them back; the consumer drains all the while, as the dispatcher takes the completion list. The
// two designs alternate round by round (the first design of a round alternates too), so a machine
// whose speed drifts shows it in both; each round prints both rates and their ratio, and the end
// the median ratio.
//
//   build/release/bench/bench_bag [ROUNDS=9] [PRODUCERS=3] [MILLISECONDS=300]
//   build/release/bench/bench_bag --single N    (one design's push and drain, N times, one thread:
//                                                for callgrind, whose count needs no clock)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "internal/lock_free_bag.hpp"

namespace {

struct alignas(64) Node {
  std::atomic<Node*> next{nullptr};
  std::atomic<bool> lent{false};  // on the bag or the consumer's: not the producer's to push
};

// The replaced design, a contender only: an exchange publishes the node, its link is stored after.
// A consumer that meets a link not yet stored keeps that node, and the chain behind it, for later.
class ExchangeBag {
 public:
  ExchangeBag() { kept_.reserve(64); }
  void push(Node& node) noexcept {
    node.next.store(half(), std::memory_order_relaxed);  // published by the exchange
    Node* const previous = head_.exchange(&node, std::memory_order_seq_cst);
    node.next.store(previous, std::memory_order_release);  // pairs with the acquire in walk()
  }
  template <class F>
  std::size_t drain(F&& f) {
    std::size_t n = 0;
    const std::size_t kept = kept_.size();
    for (std::size_t i = 0; i < kept; ++i) {
      Node* const node = kept_[i];
      kept_[i] = nullptr;
      n += walk(node, f);
    }
    std::erase(kept_, nullptr);
    // acquire: pairs with the release half of every push's exchange.
    return n + walk(head_.exchange(nullptr, std::memory_order_acquire), f);
  }

 private:
  static Node* half() noexcept { return reinterpret_cast<Node*>(std::uintptr_t{1}); }
  template <class F>
  std::size_t walk(Node* node, F& f) {
    std::size_t n = 0;
    while (node != nullptr) {
      // acquire: pairs with the release link store in push().
      Node* const next = node->next.load(std::memory_order_acquire);
      if (next == half()) {
        kept_.push_back(node);
        break;
      }
      f(*node);
      ++n;
      node = next;
    }
    return n;
  }
  std::atomic<Node*> head_{nullptr};
  std::vector<Node*> kept_;
};

using CasBag = creditloop::detail::LockFreeBag<Node, std::atomic, &Node::next>;

constexpr std::size_t kNodesEach = 256;

void return_to_producer(Node& node) {
  // release: pairs with the producer's acquire load; the consumer is done with the node.
  node.lent.store(false, std::memory_order_release);
}

// Pushes per second with `producers` threads against one draining consumer.
template <class Bag>
double pushes_per_second(int producers, std::chrono::milliseconds length) {
  Bag bag;
  std::vector<Node> nodes(kNodesEach * static_cast<std::size_t>(producers));
  std::atomic<bool> stop{false};
  std::vector<std::uint64_t> pushed(static_cast<std::size_t>(producers), 0);
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      Node* const own = nodes.data() + kNodesEach * static_cast<std::size_t>(p);
      std::uint64_t n = 0;
      std::size_t i = 0;
      // relaxed: a stop flag; nothing is read after it.
      while (!stop.load(std::memory_order_relaxed)) {
        Node& node = own[i];
        // acquire: pairs with return_to_producer()'s release store.
        if (node.lent.load(std::memory_order_acquire)) continue;  // not back yet
        node.lent.store(true, std::memory_order_relaxed);         // published by the push
        bag.push(node);
        ++n;
        i = (i + 1) % kNodesEach;
      }
      pushed[static_cast<std::size_t>(p)] = n;
    });
  }
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + length;
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 64; ++i) (void)bag.drain(return_to_producer);
  }
  stop.store(true, std::memory_order_relaxed);
  for (std::thread& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::uint64_t total = 0;
  for (std::uint64_t n : pushed) total += n;
  return static_cast<double>(total) / seconds;
}

template <class Bag>
int single(long n) {
  Bag bag;
  Node node;
  std::size_t taken = 0;
  std::printf("ops %ld\n", n);
  for (long i = 0; i < n; ++i) {
    bag.push(node);
    taken += bag.drain([](Node&) {});
  }
  return taken == static_cast<std::size_t>(n) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--single") == 0) {
    const long n = std::strtol(argv[3], nullptr, 10);
    return std::strcmp(argv[2], "exchange") == 0 ? single<ExchangeBag>(n) : single<CasBag>(n);
  }
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  const int producers = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::chrono::milliseconds length(argc > 3 ? std::atol(argv[3]) : 300);
  if (rounds <= 0 || producers <= 0 || length.count() <= 0) {
    std::fprintf(stderr,
                 "usage: bench_bag [ROUNDS>0] [PRODUCERS>0] [MILLISECONDS>0]\n"
                 "       bench_bag --single exchange|cas N\n");
    return 2;
  }
  std::vector<double> ratios;
  for (int r = 0; r < rounds; ++r) {
    double cas = 0;
    double exchange = 0;
    if (r % 2 == 0) {
      cas = pushes_per_second<CasBag>(producers, length);
      exchange = pushes_per_second<ExchangeBag>(producers, length);
    } else {
      exchange = pushes_per_second<ExchangeBag>(producers, length);
      cas = pushes_per_second<CasBag>(producers, length);
    }
    ratios.push_back(cas / exchange);
    std::printf("round %d: cas %.2f M pushes/s, exchange %.2f M pushes/s, cas/exchange %.3f\n",
                r + 1, cas * 1e-6, exchange * 1e-6, cas / exchange);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("%d producers, 1 consumer, %d rounds: median cas/exchange %.3f (%.3f .. %.3f)\n",
              producers, rounds, ratios[ratios.size() / 2], ratios.front(), ratios.back());
  return 0;
}
