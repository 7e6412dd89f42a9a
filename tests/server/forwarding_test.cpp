// The proxy's reading of the Connection header (RFC 9110 section 7.6.1): every field it names is
// dropped, every other one passed on, and a head with many fields and a long list costs
// comparisons in proportion to the two, not to their product.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>

#include "forwarding.hpp"

namespace {

namespace http = boost::beast::http;
using creditloop::server::connection_name_comparisons;

constexpr int kNamed = 400;
constexpr int kOthers = 400;
// Generous: a look-up in a set of names, a few comparisons a field, whatever the list's length.
constexpr std::uint64_t kComparisonBound = 4 * (kNamed + kOthers);

// kNamed fields the Connection headers name (in another case than the list's), kOthers they
// do not, interleaved; the list split over two Connection headers, as a client may send it.
template <class Head>
void fill(Head& head) {
  std::string first = "keep-alive";
  std::string second;
  for (int i = 0; i < kNamed; ++i) {
    std::string& list = i < kNamed / 2 ? first : second;
    list += (list.empty() ? "" : ", ") + ("X-Hop-" + std::to_string(i));
  }
  head.insert(http::field::connection, first);
  head.insert(http::field::connection, second);
  for (int i = 0; i < kNamed; ++i) {
    head.insert("x-hop-" + std::to_string(i), "hop");
    head.insert("X-Other-" + std::to_string(i), "other");
  }
}

int count_prefixed(const http::fields& f, std::string_view prefix) {
  int n = 0;
  for (const auto& field : f) {
    const std::string_view name(field.name_string().data(), field.name_string().size());
    if (name.substr(0, prefix.size()) == prefix) ++n;
  }
  return n;
}

TEST(ConnectionList, ANamedFieldIsDroppedAndTheOthersCopiedInLinearComparisons) {
  http::fields from;
  fill(from);
  http::fields to;
  const std::uint64_t before = connection_name_comparisons();
  creditloop::server::copy_end_to_end(from, to);
  const std::uint64_t made = connection_name_comparisons() - before;
  EXPECT_EQ(count_prefixed(to, "x-hop-"), 0);
  EXPECT_EQ(count_prefixed(to, "X-Other-"), kOthers);
  EXPECT_EQ(to.count(http::field::connection), 0u);
  EXPECT_LE(made, kComparisonBound);
}

TEST(ConnectionList, TheBackendsHeadDropsNamedFieldsInLinearComparisons) {
  http::request_header<> client;
  client.method(http::verb::get);
  client.target("/listed");
  client.version(11);
  client.set(http::field::host, "front.example");
  fill(client);
  http::request_header<> out;
  creditloop::server::Forwarded added;
  added.tenant = "alice";
  added.client_address = "127.0.0.1";
  added.request_id = "req-1";
  const std::uint64_t before = connection_name_comparisons();
  creditloop::server::backend_head(client, added, out);
  const std::uint64_t made = connection_name_comparisons() - before;
  EXPECT_EQ(count_prefixed(out, "x-hop-"), 0);
  EXPECT_EQ(count_prefixed(out, "X-Other-"), kOthers);
  EXPECT_EQ(out.count(http::field::connection), 0u);
  EXPECT_LE(made, kComparisonBound);
}

}  // namespace
