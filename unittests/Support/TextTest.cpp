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

TEST(Text, ByteSizes) {
  EXPECT_EQ(parseByteSize("141GB"), 141000000000);
  EXPECT_EQ(parseByteSize("80GiB"), int64_t(80) << 30);
  EXPECT_EQ(parseByteSize("512MB"), 512000000);
  EXPECT_EQ(parseByteSize("1.5KiB"), 1536);
  EXPECT_EQ(parseByteSize("4096"), 4096);
  EXPECT_EQ(parseByteSize("4096B"), 4096);
  EXPECT_EQ(parseByteSize(" 2 GB "), 2000000000);
  EXPECT_EQ(parseByteSize(""), -1);
  EXPECT_EQ(parseByteSize("GB"), -1);
  EXPECT_EQ(parseByteSize("0"), -1);
  EXPECT_EQ(parseByteSize("-1MB"), -1);
  EXPECT_EQ(parseByteSize("12XB"), -1);
  EXPECT_EQ(parseByteSize("nan"), -1);
  EXPECT_EQ(parseByteSize("1e30GB"), -1);
}
