// The backend registry: listing, auto selection and the unavailable-backend message.
#include <gtest/gtest.h>

#include "core/backend.h"
#include "expect_error.h"
#include "visattn/visattn.h"

namespace visattn {
namespace {

TEST(Registry, ListsReferenceAsAvailable) {
  const auto all = backends();
  const auto it = std::find_if(all.begin(), all.end(), [](const BackendInfo& b) { return b.name == "reference"; });
  ASSERT_NE(it, all.end());
  EXPECT_TRUE(it->available);
  EXPECT_TRUE(it->unavailable_reason.empty());
  EXPECT_EQ(it->device, DeviceType::cpu);
  EXPECT_EQ(it->dtypes.size(), 3u);
}

// A backend that cannot run here is not asked what it would run (it may have nothing loaded).
TEST(Registry, UnavailableBackendsCarryAReasonAndNoDetail) {
  for (const BackendInfo& b : backends()) {
    EXPECT_EQ(b.available, b.unavailable_reason.empty()) << b.name;
    if (!b.available) EXPECT_TRUE(b.detail.empty()) << b.name << ": " << b.detail;
  }
}

TEST(Registry, AutoPicksTheHighestPriorityCpuBackend) {
  const Backend* best = nullptr;
  for (const Backend& b : backend_table()) {
    if (b.device == DeviceType::cpu && b.unavailable_reason().empty() &&
        (!best || b.auto_priority > best->auto_priority)) {
      best = &b;
    }
  }
  ASSERT_NE(best, nullptr);
  EXPECT_EQ(auto_backend(DeviceType::cpu), best->name);
}

TEST(Registry, NamesAreUnique) {
  const auto& table = backend_table();
  for (size_t i = 0; i < table.size(); ++i)
    for (size_t j = i + 1; j < table.size(); ++j) EXPECT_STRNE(table[i].name, table[j].name);
}

TEST(Registry, SystemInfoDescribesTheBuild) {
  const SystemInfo info = system_info();
  EXPECT_EQ(info.version, version());
  EXPECT_FALSE(info.compiler.empty());
  EXPECT_GE(info.num_threads, 1);
}

}  // namespace
}  // namespace visattn
