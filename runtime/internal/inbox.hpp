// runtime/internal/inbox.hpp: one participant's submission queue, from many producers to the
// dispatcher: a push is one compare-and-swap onto a LIFO chain, a take one exchange of the whole
// chain, which it reverses. Internal to the runtime: not installed, not part of the public API.
//
//   head, bits 48-63   the low 16 bits of the registration's generation
//   head, bits 0-47    the newest request's address (a multiple of 8); 1: closed; empty: the
//                      generation's high 16 bits shifted left by 3, with bit 1 set
//   generation_        the open registration's whole 32-bit generation
//
//   push(), CAS          seq_cst: releases the request and its link; the activation protocol
//   push(), head loads   acquire: pairs with close()'s release (shutdown_flag_model) and open()'s
//   take(), exchange     seq_cst: acquires every push's CAS; seq_cst as push's
//   close(), exchange    acq_rel: acquires as take()'s; releases to the pushes it refuses
//   open()               the generation relaxed, then the head release: a push reads the
//                        generation after each acquire load of the head
//
// `Atomic` and `Link` (a Relacy variable there) are template parameters for tests/relacy.
//
// Why: docs/design.md#the-inbox
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
