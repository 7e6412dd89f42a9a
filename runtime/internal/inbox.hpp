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
// newest request's address (a multiple of 8), 1 for closed (removed or shut down), or, for empty,
// the generation's high 16 bits shifted left by 3 with bit 1 set (never a node's address): an
// empty inbox's word names its registration's whole 32-bit generation. Beside the head, the inbox
// keeps that generation, which push() reads after every load of the head. A push is refused if
// the participant was removed, or removed and its place reused, before its compare-and-swap; a
// request lands in a later participant's inbox only if, between one producer's last load of the
// head and its compare-and-swap, the same place was re-registered
//  - a multiple of 2^32 times, when the producer found the inbox empty (the generation itself
//    wraps there, as ParticipantId's does: include/creditloop/participant.hpp gives the
//    arithmetic, over half an hour of nothing but churn); or
//  - a multiple of 65,536 times, when it found a request at the head, and the very request that
//    was then the newest of the old registration is the newest of the new one at the instant of
//    the compare-and-swap: handed back by the removal, resubmitted to the place's new tenant, and
//    not yet taken by the dispatcher, 65,536 registrations later.
// With only the 16-bit tag, a producer stopped while 65,536 re-registrations of its place went by
// (well under a second of churn) queued its request for, and charged it to, the new tenant,
// whether it had found the inbox empty or not (tests/runtime/inbox_test.cpp). A 16-byte
// compare-and-swap would close the second case too, at the cost of every push.
//
// The 48-bit address is what x86-64 and AArch64 Linux give user space unless a program asks for
// higher addresses with an mmap hint.
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
// open() stores the registration's generation and then the head with release, and push reads
// the generation after each acquire load of the head: a producer that reads a head of a later
// registration reads that registration's generation with it and is refused.
//
// `Atomic` and `Link` are template parameters so that the memory-model checks (tests/relacy) run
// this code, with the link a Relacy variable.
#pragma once

#include <atomic>
#include <cstdint>

#include "internal/test_hooks.hpp"

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
  /// registration than `registration` (a generation). queued_first: the inbox was empty, the
  /// caller must activate it. unsupported: `node`'s address has a bit above bit 47 set (a pointer
  /// tag); the node is not touched, and the inbox is unchanged.
  Push push(Node& node, std::uint32_t registration) noexcept {
    if (!packable(&node)) [[unlikely]] {
      return Push::unsupported;  // before the node is touched: it may not be ours to write
    }
    const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(&node);
    const std::uint64_t empty = empty_for(registration);
    // acquire: pairs with close()'s release, for a producer it refuses (see the file comment);
    // otherwise validated by the CAS below.
    std::uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      // relaxed: after the acquire load of the head, which an open() released with this
      // registration's generation stored before it (see open()). A head of a later registration
      // therefore comes with its generation, and the push is refused whatever the 16-bit tags say.
      if (generation_.load(std::memory_order_relaxed) != registration) return Push::refused;
      const bool queued_before = !is_empty(head);
      if (queued_before ? tag_of(head) != tag_of(empty) || address_of(head) == kClosed
                        : head != empty) {
        return Push::refused;
      }
      Link::set(node, queued_before ? reinterpret_cast<Node*>(address_of(head)) : nullptr);
      // A stop here, after the load and before the CAS, is the window of a stale push.
      CREDITLOOP_TEST_HOOK(inbox_pushing);
      // seq_cst on success: release pairs with the exchange in take()/close() and publishes the
      // node and its link; seq_cst because the runtime's activation flag is the other half of a
      // Dekker pair with this push (runtime.cpp, activate()).
      // acquire on failure: the head it reads may be close()'s (see the first load).
      if (head_.compare_exchange_weak(head, pack(tag_of(empty), address), std::memory_order_seq_cst,
                                      std::memory_order_acquire)) {
        return queued_before ? Push::queued : Push::queued_first;
      }
    }
  }

  /// Dispatcher only. Takes everything queued, oldest first, leaving the inbox open and empty.
  /// Returns the oldest request (linked through Link to the newest, which links to nullptr).
  Node* take(std::uint32_t registration) noexcept {
    // seq_cst: acquire pairs with the CAS of every push; seq_cst for the runtime's activation
    // flag (see push()).
    return reversed(head_.exchange(empty_for(registration), std::memory_order_seq_cst));
  }

  /// Dispatcher only. Takes everything queued, oldest first, and refuses every later push until
  /// open() is called.
  Node* close() noexcept {
    // acquire: pairs with the release CAS of every push. release: pairs with the acquire of a push
    // this close refuses (see the file comment).
    return reversed(head_.exchange(pack(0, kClosed), std::memory_order_acq_rel));
  }

  /// Dispatcher only. Opens an empty inbox for the registration with generation `registration`.
  /// The inbox must be closed (a new inbox starts closed).
  void open(std::uint32_t registration) noexcept {
    // relaxed: published by the release store of the head just after.
    generation_.store(registration, std::memory_order_relaxed);
    // release: pairs with push()'s acquire loads of the head, which then read this generation or
    // a later one. Every later change of the head is a read-modify-write, so a head a push reads
    // from any of them carries this release too.
    head_.store(empty_for(registration), std::memory_order_release);
  }

 private:
  static_assert(alignof(Node) >= 8, "a node's address has its low 3 bits clear (the empty mark)");
  static constexpr std::uintptr_t kClosed = 1;
  static constexpr std::uintptr_t kEmptyMark = 2;
  static constexpr std::uintptr_t kLowBits = 7;
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
  static std::uint64_t empty_for(std::uint32_t registration) noexcept {
    return pack(static_cast<std::uint16_t>(registration),
                (std::uintptr_t{registration >> 16} << 3) | kEmptyMark);
  }
  static bool is_empty(std::uint64_t head) noexcept { return (head & kLowBits) == kEmptyMark; }

  static Node* reversed(std::uint64_t head) noexcept {
    const std::uintptr_t address = address_of(head);
    if (is_empty(head) || address == kClosed) return nullptr;
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
  Atomic<std::uint32_t> generation_{0};  // the open registration's (or the last one's)
};

}  // namespace creditloop::detail
