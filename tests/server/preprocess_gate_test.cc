// PreprocessGate (server/preprocess_gate.h): the cap on requests parsed and
// tokenized at once (issue 16, defect 2). No sleeps: tickets are held and
// released by the test.
#include "server/preprocess_gate.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace dserve {
namespace {

TEST(PreprocessGateTest, GrantsUpToTheLimitThenRefusesWithoutBlocking) {
  std::vector<int> seen;
  PreprocessGate gate(2, [&](int n) { seen.push_back(n); });
  PreprocessGate::Ticket a = gate.TryEnter();
  PreprocessGate::Ticket b = gate.TryEnter();
  EXPECT_TRUE(a);
  EXPECT_TRUE(b);
  EXPECT_EQ(gate.in_use(), 2);
  PreprocessGate::Ticket c = gate.TryEnter();
  EXPECT_FALSE(c);  // refused at once
  EXPECT_EQ(gate.in_use(), 2);
  a.Release();
  EXPECT_FALSE(a);
  a.Release();  // idempotent
  EXPECT_EQ(gate.in_use(), 1);
  c = gate.TryEnter();
  EXPECT_TRUE(c);
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 1, 2}));
}

TEST(PreprocessGateTest, TicketReleasesOnDestructionAndMove) {
  PreprocessGate gate(1);
  {
    PreprocessGate::Ticket t = gate.TryEnter();
    ASSERT_TRUE(t);
    PreprocessGate::Ticket moved = std::move(t);
    EXPECT_FALSE(t);  // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_TRUE(moved);
    EXPECT_FALSE(gate.TryEnter());
  }
  EXPECT_EQ(gate.in_use(), 0);
  EXPECT_TRUE(gate.TryEnter());
}

TEST(PreprocessGateTest, LimitBelowOneMeansOne) {
  PreprocessGate gate(0);
  EXPECT_EQ(gate.limit(), 1);
}

TEST(PreprocessGateTest, NeverMoreThanTheLimitUnderContention) {
  PreprocessGate gate(3);
  std::atomic<int> inside{0}, most{0}, granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        PreprocessGate::Ticket ticket = gate.TryEnter();
        if (!ticket) continue;
        granted.fetch_add(1);
        const int now = inside.fetch_add(1) + 1;
        int prev = most.load();
        while (now > prev && !most.compare_exchange_weak(prev, now)) {
        }
        inside.fetch_sub(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(most.load(), 3);
  EXPECT_GT(granted.load(), 0);
  EXPECT_EQ(gate.in_use(), 0);
}

}  // namespace
}  // namespace dserve
