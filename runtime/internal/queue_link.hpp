// runtime/internal/queue_link.hpp: how the runtime's queue code reaches a request's queue link.
// Internal to the runtime: not installed, not part of the public API.
//
// The inbox writes a request's link on the producer's thread and reads and rewrites it on the
// dispatcher's; the hand-off between them is the inbox head's compare-and-swap and exchange. The
// link itself is a plain pointer, so a missing hand-off is a data race on it. The queue code reads
// and writes the link only through a policy, so that the memory-model checks (tests/relacy) can
// make it a Relacy variable, whose every unordered access between two threads is reported; the
// runtime's policy is the member itself, and compiles to the same loads and stores as
// `node.*Member`.
#pragma once

namespace creditloop::detail {

/// The link as the runtime ships it: the pointer member `Member` of `Node`.
template <class Node, Node* Node::*Member>
struct MemberLink {
  [[nodiscard]] static Node* get(const Node& node) noexcept { return node.*Member; }
  static void set(Node& node, Node* next) noexcept { node.*Member = next; }
};

}  // namespace creditloop::detail
