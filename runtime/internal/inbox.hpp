// runtime/internal/inbox.hpp: one participant's submission queue, many producers and the
// dispatcher. Internal to the runtime: not installed, not part of the public API.
//
// Producers link requests onto a LIFO chain with one compare-and-swap on the head; the dispatcher
// takes the whole chain with one exchange and reverses it, so it moves a participant's whole
// backlog per cache-line transfer and hands it to the core oldest first. The push that finds the
// inbox empty learns it from the same compare-and-swap, which is how the dispatcher hears of a
// newly non-empty queue without scanning (the pusher then activates the participant).
//
// The head word also carries whether the inbox accepts pushes and for which registration of its
// ring place: bits 48-63 are the low 16 bits of the registration's generation; bits 0-47 are the
// newest request's address, 0 for empty, or 1 for closed (removed or shut down). A producer's
// compare-and-swap therefore fails if the participant was removed, or removed and its place
// reused, since it read the head: a request can never land in a later participant's inbox unless
// the same place was re-registered a multiple of 65,536 times between one producer's load and
// its compare-and-swap. The 48-bit address is what x86-64 and AArch64 Linux give user space
// unless a program asks for higher addresses with an mmap hint.
//
// A pointer may also carry a tag in its top bits, which the hardware ignores when it loads:
// AArch64 top-byte-ignore (bits 56-63) with MTE or HWASan, x86 linear address masking (bits
// 57-62, or 48-62). Masking such a pointer to 48 bits would hand the dispatcher a pointer whose
// tag no longer matches its memory, which MTE and HWASan fault on at the first access. Keeping the
// top byte would leave 8 bits of generation (a reused place could take a stale push after 256
// re-registrations, not 65,536) and still lose LAM's bits 48-55; a double-width compare-and-swap
// would cost every push. So push() refuses an address with any bit above 47 set (unsupported: one
// shift and a branch, before it touches the node), and the runtime refuses at construction to run
// where its own heap and stack pointers carry such bits (runtime.cpp, check_addresses()), naming
// the cause.
//
// Why a compare-and-swap loop (lock-free) and not a wait-free exchange: the push must be refused
// atomically when the inbox is closed or re-registered, and an exchange cannot refuse. Only the
// producers of one participant contend on its head.
//
// Memory orders: push's successful CAS (release) / take's and close's exchange (acquire) publish
// the request's contents and its link; push and take are seq_cst for the runtime's activation
// protocol (runtime.cpp). close()'s exchange is also a release, and push reads the head with
// acquire (its first load and a failed CAS): a producer refused by a close() sees everything the
// dispatcher wrote before closing, so the runtime's shutdown flag, cleared before the inboxes are
// closed, reads false for it and the refusal says shut_down (tests/relacy/shutdown_flag_model).
// open() is relaxed: a producer reads nothing but the head word itself, and its CAS re-validates
// what it read.
//
// `Atomic` and `Link` are template parameters so that the memory-model checks (tests/relacy) run
// this code, with the link a Relacy variable.
#pragma once

#include <atomic>
#include <cstdint>

namespace creditloop::detail {

// `Link` reaches a node's queue link (queue_link.hpp).
template <class Node, template <class> class Atomic, class Link>
class Inbox {
 public:
  enum class Push : std::uint8_t { queued, queued_first, refused, unsupported };

  /// Whether the head word can hold `p`: no bit above bit 47 (see the file comment).
  [[nodiscard]] static bool packable(const void* p) noexcept {
    return (reinterpret_cast<std::uintptr_t>(p) >> kTagShift) == 0;
  }

  /// Any thread. Lock-free. Links `node` unless the inbox is closed or belongs to another
  /// registration than `tag`. queued_first: the inbox was empty, the caller must activate it.
  /// unsupported: `node`'s address has a bit above bit 47 set (a pointer tag); the node is not
  /// touched, and the inbox is unchanged.
  Push push(Node& node, std::uint16_t tag) noexcept {
    if (!packable(&node)) [[unlikely]] {
      return Push::unsupported;  // before the node is touched: it may not be ours to write
    }
    const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(&node);
    // acquire: pairs with close()'s release, for a producer it refuses (see the file comment);
    // otherwise validated by the CAS below.
    std::uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      if (tag_of(head) != tag || address_of(head) == kClosed) return Push::refused;
      Link::set(node, reinterpret_cast<Node*>(address_of(head)));
      // seq_cst on success: release pairs with the exchange in take()/close() and publishes the
      // node and its link; seq_cst because the runtime's activation flag is the other half of a
      // Dekker pair with this push (runtime.cpp, activate()).
      // acquire on failure: the head it reads may be close()'s (see the first load).
      if (head_.compare_exchange_weak(head, pack(tag, address), std::memory_order_seq_cst,
                                      std::memory_order_acquire)) {
        return address_of(head) == kEmpty ? Push::queued_first : Push::queued;
      }
    }
  }

  /// Dispatcher only. Takes everything queued, oldest first, leaving the inbox open and empty.
  /// Returns the oldest request (linked through Link to the newest, which links to nullptr).
  Node* take(std::uint16_t tag) noexcept {
    // seq_cst: acquire pairs with the CAS of every push; seq_cst for the runtime's activation
    // flag (see push()).
    return reversed(head_.exchange(pack(tag, kEmpty), std::memory_order_seq_cst));
  }

  /// Dispatcher only. Takes everything queued, oldest first, and refuses every later push until
  /// open() is called.
  Node* close() noexcept {
    // acquire: pairs with the release CAS of every push. release: pairs with the acquire of a push
    // this close refuses (see the file comment).
    return reversed(head_.exchange(pack(0, kClosed), std::memory_order_acq_rel));
  }

  /// Dispatcher only. Opens an empty inbox for the registration with generation tag `tag`. The
  /// inbox must be closed (a new inbox starts closed).
  void open(std::uint16_t tag) noexcept {
    // relaxed: a producer reads nothing but the head word, whose CAS re-validates it.
    head_.store(pack(tag, kEmpty), std::memory_order_relaxed);
  }

  [[nodiscard]] static std::uint16_t tag_for(std::uint32_t generation) noexcept {
    return static_cast<std::uint16_t>(generation);
  }

 private:
  static constexpr std::uintptr_t kEmpty = 0;
  static constexpr std::uintptr_t kClosed = 1;
  static constexpr int kTagShift = 48;
  static constexpr std::uint64_t kAddressMask = (std::uint64_t{1} << kTagShift) - 1;
  static_assert(sizeof(void*) == 8, "the head packs a 48-bit address with a 16-bit tag");

  static std::uint64_t pack(std::uint16_t tag, std::uintptr_t address) noexcept {
    return (std::uint64_t{tag} << kTagShift) | (address & kAddressMask);
  }
  static std::uint16_t tag_of(std::uint64_t head) noexcept {
    return static_cast<std::uint16_t>(head >> kTagShift);
  }
  static std::uintptr_t address_of(std::uint64_t head) noexcept { return head & kAddressMask; }

  static Node* reversed(std::uint64_t head) noexcept {
    const std::uintptr_t address = address_of(head);
    if (address == kEmpty || address == kClosed) return nullptr;
    Node* newest_first = reinterpret_cast<Node*>(address);
    Node* oldest_first = nullptr;
    while (newest_first != nullptr) {
      Node* const next = Link::get(*newest_first);
      Link::set(*newest_first, oldest_first);
      oldest_first = newest_first;
      newest_first = next;
    }
    return oldest_first;
  }

  Atomic<std::uint64_t> head_{pack(0, kClosed)};
};

}  // namespace creditloop::detail
