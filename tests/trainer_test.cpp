#include <gtest/gtest.h>

#include "tests/support/seeding.h"
#include "trainer/trainer.h"

struct TrainerTest : lt::testing::SeedingFixture {};

TEST_F(TrainerTest, Placeholder) { SUCCEED(); }
