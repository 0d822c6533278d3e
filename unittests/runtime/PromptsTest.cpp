//===- PromptsTest.cpp - Tests for prompt file parsing --------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "mfrt/io/Prompts.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <unistd.h>

using namespace mfrt;

namespace {

class PromptsTest : public ::testing::Test {
protected:
  void SetUp() override {
    char pattern[] = "/tmp/mfrt-prompts-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir = pattern;
  }

  void TearDown() override {
    for (const std::string &path : created)
      std::remove(path.c_str());
    rmdir(dir.c_str());
  }

  std::string write(const std::string &text) {
    std::string path =
        dir + "/prompts" + std::to_string(created.size()) + ".txt";
    std::ofstream out(path, std::ios::binary);
    out << text;
    created.push_back(path);
    return path;
  }

  /// Parses \p text expecting failure; checks the error is one line that
  /// starts with the file name, and returns it.
  std::string parseError(const std::string &text, int64_t vocab = 100) {
    std::string path = write(text);
    std::vector<std::vector<int64_t>> out;
    std::string error;
    EXPECT_FALSE(parsePrompts(path, vocab, out, &error));
    EXPECT_TRUE(out.empty());
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    EXPECT_EQ(error.rfind(path + ": ", 0), 0u) << error;
    return error.substr(path.size() + 2);
  }

  std::string dir;
  std::vector<std::string> created;
};

} // namespace

TEST_F(PromptsTest, Good) {
  std::vector<std::vector<int64_t>> out;
  std::string error;
  ASSERT_TRUE(parsePrompts(write("1 2 3\n0\t99  5\n"), 100, out, &error))
      << error;
  EXPECT_EQ(out, (std::vector<std::vector<int64_t>>{{1, 2, 3}, {0, 99, 5}}));

  // No trailing newline, CRLF line ends, leading/trailing blanks.
  ASSERT_TRUE(parsePrompts(write("  7 8 \r\n9"), 100, out, &error)) << error;
  EXPECT_EQ(out, (std::vector<std::vector<int64_t>>{{7, 8}, {9}}));
}

TEST_F(PromptsTest, Unreadable) {
  std::vector<std::vector<int64_t>> out;
  std::string error;
  EXPECT_FALSE(parsePrompts(dir + "/missing.txt", 100, out, &error));
  EXPECT_NE(error.find(dir + "/missing.txt: cannot open"), std::string::npos)
      << error;
  EXPECT_FALSE(parsePrompts(dir, 100, out, &error));
  EXPECT_NE(error.find(dir + ": cannot read"), std::string::npos) << error;
}

TEST_F(PromptsTest, NoRequests) {
  EXPECT_EQ(parseError(""), "no requests (the file is empty)");
}

TEST_F(PromptsTest, EmptyLines) {
  EXPECT_EQ(parseError("1 2\n3\n\n4\n"), "line 3: empty prompt");
  EXPECT_EQ(parseError("1 2\n \t \n4\n"), "line 2: empty prompt");
  EXPECT_EQ(parseError("\n"), "line 1: empty prompt");
  // Only one trailing newline is allowed.
  EXPECT_EQ(parseError("1\n\n"), "line 2: empty prompt");
}

TEST_F(PromptsTest, NonInteger) {
  EXPECT_EQ(parseError("1 2\n3 abc 4\n"),
            "line 2: token 'abc' is not an integer");
  EXPECT_EQ(parseError("1.5\n"), "line 1: token '1.5' is not an integer");
  EXPECT_EQ(parseError("+3\n"), "line 1: token '+3' is not an integer");
  EXPECT_EQ(parseError("1,2\n"), "line 1: token '1,2' is not an integer");
  EXPECT_EQ(parseError("-\n"), "line 1: token '-' is not an integer");
}

TEST_F(PromptsTest, Negative) {
  EXPECT_EQ(parseError("5\n1 -4\n"), "line 2: token '-4' is negative");
}

TEST_F(PromptsTest, OutOfVocab) {
  EXPECT_EQ(parseError("1 100\n", 100),
            "line 1: token '100' is out of range for vocabulary size 100");
  EXPECT_EQ(parseError("99999999999999999999999\n", 100),
            "line 1: token '99999999999999999999999' is out of range for "
            "vocabulary size 100");
}

TEST_F(PromptsTest, FromText) {
  std::vector<std::vector<int64_t>> out;
  std::string error;
  EXPECT_TRUE(parsePromptsText("3 4\n", "<mem>", 5, out, &error)) << error;
  EXPECT_FALSE(parsePromptsText("3 5\n", "<mem>", 5, out, &error));
  EXPECT_EQ(error, "<mem>: line 1: token '5' is out of range for vocabulary "
                   "size 5");
}
