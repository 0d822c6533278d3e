//===- TextTest.cpp - Parsing the small text formats ----------------------===//

#include "meshfold/Support/Text.h"

#include "gtest/gtest.h"

using namespace meshfold;

TEST(Text, Integers) {
  int64_t v = 0;
  EXPECT_TRUE(parseInt("42", v));
  EXPECT_EQ(v, 42);
  EXPECT_TRUE(parseInt("-7", v));
  EXPECT_EQ(v, -7);
  EXPECT_FALSE(parseInt("", v));
  EXPECT_FALSE(parseInt("4x", v));
  EXPECT_FALSE(parseInt("99999999999999999999", v));
  EXPECT_TRUE(parseUnsignedInt("40", v));
  EXPECT_EQ(v, 40);
  EXPECT_FALSE(parseUnsignedInt("-1", v));
  EXPECT_FALSE(parseUnsignedInt("+1", v));
  EXPECT_FALSE(parseUnsignedInt(" 1", v));
  EXPECT_FALSE(parseUnsignedInt("99999999999999999999", v));
}

TEST(Text, Doubles) {
  double v = 0;
  EXPECT_TRUE(parseDouble("450", v));
  EXPECT_EQ(v, 450.0);
  EXPECT_TRUE(parseDouble("2.5e1", v));
  EXPECT_EQ(v, 25.0);
  EXPECT_FALSE(parseDouble("", v));
  EXPECT_FALSE(parseDouble("1GB", v));
}

TEST(Text, Split) {
  EXPECT_EQ(split("a,,b,", ','), (std::vector<std::string>{"a", "", "b", ""}));
  EXPECT_EQ(split("tp:2", ':'), (std::vector<std::string>{"tp", "2"}));
  EXPECT_TRUE(split("", ',').empty());
}
