//===- SafetensorsTest.cpp - Tests for the safetensors reader/writer ------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "mfrt/io/Safetensors.h"
#include "meshfold/Support/DType.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mfrt;
using namespace meshfold;

namespace {

/// Creates a fresh temporary directory per test and removes it afterwards.
class SafetensorsTest : public ::testing::Test {
protected:
  void SetUp() override {
    char pattern[] = "/tmp/mfrt-safetensors-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir = pattern;
  }

  void TearDown() override {
    if (DIR *d = opendir(dir.c_str())) {
      while (dirent *entry = readdir(d)) {
        std::string name = entry->d_name;
        if (name != "." && name != "..")
          std::remove((dir + "/" + name).c_str());
      }
      closedir(d);
    }
    rmdir(dir.c_str());
  }

  std::string file(const std::string &name) const { return dir + "/" + name; }

  /// Writes raw bytes to \p name and returns its path.
  std::string writeBytes(const std::string &name, const std::string &bytes) {
    std::string path = file(name);
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  /// Writes a safetensors file with header \p json (length prefix computed
  /// from its size, or \p declaredLength when given) and \p dataSize zero
  /// bytes of data.
  std::string writeRaw(const std::string &name, const std::string &json,
                       size_t dataSize, int64_t declaredLength = -1) {
    uint64_t length = declaredLength < 0
                          ? json.size()
                          : static_cast<uint64_t>(declaredLength);
    std::string bytes;
    for (int i = 0; i < 8; ++i)
      bytes += static_cast<char>((length >> (8 * i)) & 0xff);
    bytes += json;
    bytes += std::string(dataSize, '\0');
    return writeBytes(name, bytes);
  }

  /// Opens \p path expecting failure; returns the error.
  std::string openError(const std::string &path) {
    std::string error;
    std::unique_ptr<SafetensorsFile> f = SafetensorsFile::open(path, &error);
    EXPECT_EQ(f, nullptr);
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    EXPECT_EQ(error.rfind(path, 0), 0u)
        << "error must start with the path: " << error;
    return error;
  }

  std::string dir;
};

} // namespace

#define EXPECT_CONTAINS(haystack, needle)                                      \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos)             \
      << "'" << (haystack) << "' does not contain '" << (needle) << "'"

TEST_F(SafetensorsTest, RoundTripF32AndBF16) {
  std::vector<float> a = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, -7.0f};
  std::vector<float> b = {0.5f, 1.0f / 3.0f, -100.0f, 65504.0f};
  std::vector<uint16_t> bBits;
  for (float v : b)
    bBits.push_back(f32ToBF16(v));
  std::vector<int64_t> ints = {-1, 0, 1ll << 40};

  SafetensorsWriter writer;
  writer.add("layer.a", DType::F32, {2, 3}, a.data());
  writer.add("layer.b", DType::BF16, {4}, bBits.data());
  writer.add("ids", DType::I64, {3}, ints.data());
  writer.add("empty", DType::F32, {0, 5}, nullptr);
  writer.addF32("scalar", {}, {42.0f});
  writer.setMetadata("format", "pt");
  writer.setMetadata("quote\"d", "line\nbreak");
  std::string error;
  std::string path = file("rt.safetensors");
  ASSERT_TRUE(writer.write(path, &error)) << error;
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0) << "tmp file left";

  std::unique_ptr<SafetensorsFile> f = SafetensorsFile::open(path, &error);
  ASSERT_NE(f, nullptr) << error;
  EXPECT_EQ(f->names(), (std::vector<std::string>{"layer.a", "layer.b", "ids",
                                                  "empty", "scalar"}));
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("quote\"d"), "line\nbreak");

  const TensorInfo *ta = f->find("layer.a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, DType::F32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->numElements(), 6);
  std::vector<float> aBack(6);
  ASSERT_TRUE(readAsF32(*ta, aBack.data(), aBack.size(), &error)) << error;
  EXPECT_EQ(aBack, a);

  const TensorInfo *tb = f->find("layer.b");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, DType::BF16);
  EXPECT_EQ(tb->byteSize, 8u);
  std::vector<float> bBack(4);
  ASSERT_TRUE(readAsF32(*tb, bBack.data(), bBack.size(), &error)) << error;
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(bBack[i], bf16ToF32(bBits[i]));
    EXPECT_NEAR(bBack[i], b[i], std::fabs(b[i]) / 128);
  }

  const TensorInfo *tids = f->find("ids");
  ASSERT_NE(tids, nullptr);
  std::vector<int64_t> idsBack(3);
  std::memcpy(idsBack.data(), tids->data, 24);
  EXPECT_EQ(idsBack, ints);
  EXPECT_FALSE(readAsF32(*tids, aBack.data(), 3, &error));
  EXPECT_CONTAINS(error, "tensor 'ids'");
  EXPECT_CONTAINS(error, "I64");

  const TensorInfo *te = f->find("empty");
  ASSERT_NE(te, nullptr);
  EXPECT_EQ(te->numElements(), 0);
  const TensorInfo *ts = f->find("scalar");
  ASSERT_NE(ts, nullptr);
  EXPECT_TRUE(ts->shape.empty());
  float scalar = 0;
  ASSERT_TRUE(readAsF32(*ts, &scalar, 1, &error)) << error;
  EXPECT_EQ(scalar, 42.0f);
  EXPECT_EQ(f->find("missing"), nullptr);

  // Wrong destination size.
  EXPECT_FALSE(readAsF32(*ta, aBack.data(), 5, &error));
  EXPECT_CONTAINS(error, "tensor 'layer.a'");
}

TEST_F(SafetensorsTest, HeaderIsPaddedToEightBytes) {
  for (int n = 1; n < 10; ++n) {
    SafetensorsWriter writer;
    writer.addF32(std::string(n, 'x'), {1}, {1.0f});
    std::string header, error;
    ASSERT_TRUE(writer.buildHeader(header, &error)) << error;
    EXPECT_EQ(header.size() % 8, 0u);
    std::string path = file("pad.safetensors");
    ASSERT_TRUE(writer.write(path, &error)) << error;
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(static_cast<size_t>(st.st_size), 8 + header.size() + 4);
    std::unique_ptr<SafetensorsFile> f = SafetensorsFile::open(path, &error);
    ASSERT_NE(f, nullptr) << error;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f->tensors()[0].data) % 8, 0u);
  }
}

TEST_F(SafetensorsTest, ReadsF16) {
  std::vector<float> values = {1.0f, -0.5f, 65504.0f, 6.1035156e-05f,
                               5.9604645e-08f};
  std::vector<uint16_t> bits;
  for (float v : values)
    bits.push_back(f32ToF16(v));
  SafetensorsWriter writer;
  writer.add("h", DType::F16, {5}, bits.data());
  std::string error, path = file("f16.safetensors");
  ASSERT_TRUE(writer.write(path, &error)) << error;
  std::unique_ptr<SafetensorsFile> f = SafetensorsFile::open(path, &error);
  ASSERT_NE(f, nullptr) << error;
  std::vector<float> back(5);
  ASSERT_TRUE(readAsF32(*f->find("h"), back.data(), 5, &error)) << error;
  EXPECT_EQ(back, values);
}

// fp8 (F8_E4M3) tensors are one byte per element and round-trip; they are
// not read as f32 on their own: their values need the block scales.
TEST_F(SafetensorsTest, F8E4M3IsStoredNotReadAsF32) {
  std::vector<uint8_t> codes = {0x38, 0xb8, 0x7e, 0x01, 0x00, 0x40};
  SafetensorsWriter writer;
  writer.add("q", DType::F8_E4M3, {2, 3}, codes.data());
  std::string error, path = file("f8.safetensors");
  ASSERT_TRUE(writer.write(path, &error)) << error;
  std::unique_ptr<SafetensorsFile> f = SafetensorsFile::open(path, &error);
  ASSERT_NE(f, nullptr) << error;
  const TensorInfo *t = f->find("q");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::F8_E4M3);
  EXPECT_STREQ(dtypeName(t->dtype), "F8_E4M3");
  EXPECT_EQ(t->byteSize, 6u);
  EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + 6), codes);
  std::vector<float> values(6);
  EXPECT_FALSE(readAsF32(*t, values.data(), 6, &error));
  EXPECT_CONTAINS(error, "dtype F8_E4M3 cannot be read as f32");
}

TEST_F(SafetensorsTest, AcceptsForeignHeaderLayout) {
  // Key order, whitespace, escapes and no padding as other writers emit them.
  std::string path = writeRaw(
      "foreign.safetensors",
      " { \"b\\u00e9\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 4 , 12 ], "
      "\"dtype\" : \"F32\" } , \"__metadata__\" : { } , \"a\":{\"dtype\":"
      "\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}\n",
      12);
  std::string error;
  std::unique_ptr<SafetensorsFile> f = SafetensorsFile::open(path, &error);
  ASSERT_NE(f, nullptr) << error;
  EXPECT_EQ(f->names(), (std::vector<std::string>{"b\xc3\xa9", "a"}));
  EXPECT_TRUE(f->metadata().empty());
}

TEST_F(SafetensorsTest, TruncatedFile) {
  std::string error = openError(writeBytes("short.safetensors", "abc"));
  EXPECT_CONTAINS(error, "too short");
  EXPECT_CONTAINS(error, "3 bytes");
  error = openError(writeBytes("empty.safetensors", ""));
  EXPECT_CONTAINS(error, "too short");
}

TEST_F(SafetensorsTest, MissingFile) {
  std::string error = openError(file("nope.safetensors"));
  EXPECT_CONTAINS(error, "cannot open");
}

TEST_F(SafetensorsTest, HeaderLengthPastFile) {
  std::string error =
      openError(writeRaw("hdr.safetensors", "{}", 0, /*declaredLength=*/1000));
  EXPECT_CONTAINS(error, "header length 1000");
  EXPECT_CONTAINS(error, "runs past the end of the file (10 bytes)");
  // An absurd length must not overflow.
  error = openError(writeRaw("hdr2.safetensors", "{}", 0, INT64_MAX));
  EXPECT_CONTAINS(error, "header length");
}

TEST_F(SafetensorsTest, OffsetsPastData) {
  std::string path =
      writeRaw("past.safetensors",
               "{\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[100],"
               "\"data_offsets\":[0,400]}}",
               256);
  std::string error = openError(path);
  EXPECT_EQ(error, path + ": tensor 'model.norm.weight': data_offsets [0, 400] "
                          "run past the end of the data (256 bytes)");
}

TEST_F(SafetensorsTest, BeginAfterEnd) {
  std::string error =
      openError(writeRaw("rev.safetensors",
                         "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                         "\"data_offsets\":[8,4]}}",
                         16));
  EXPECT_CONTAINS(error, "tensor 't'");
  EXPECT_CONTAINS(error, "begin > end");
}

TEST_F(SafetensorsTest, OverlappingRanges) {
  std::string error =
      openError(writeRaw("overlap.safetensors",
                         "{\"first\":{\"dtype\":\"F32\",\"shape\":[4],"
                         "\"data_offsets\":[0,16]},"
                         "\"second\":{\"dtype\":\"F32\",\"shape\":[4],"
                         "\"data_offsets\":[12,28]}}",
                         32));
  EXPECT_CONTAINS(error, "'first' (data_offsets [0, 16])");
  EXPECT_CONTAINS(error, "'second' (data_offsets [12, 28])");
  EXPECT_CONTAINS(error, "overlap");
}

TEST_F(SafetensorsTest, AdjacentAndEmptyRangesDoNotOverlap) {
  std::string path = writeRaw("adjacent.safetensors",
                              "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],"
                              "\"data_offsets\":[0,16]},"
                              "\"e\":{\"dtype\":\"F32\",\"shape\":[0],"
                              "\"data_offsets\":[8,8]},"
                              "\"b\":{\"dtype\":\"F32\",\"shape\":[4],"
                              "\"data_offsets\":[16,32]}}",
                              32);
  std::string error;
  EXPECT_NE(SafetensorsFile::open(path, &error), nullptr) << error;
}

TEST_F(SafetensorsTest, WrongByteSizeForShape) {
  std::string error =
      openError(writeRaw("size.safetensors",
                         "{\"w\":{\"dtype\":\"BF16\",\"shape\":[3,4],"
                         "\"data_offsets\":[0,48]}}",
                         48));
  EXPECT_CONTAINS(error, "tensor 'w'");
  EXPECT_CONTAINS(error, "hold 48 bytes");
  EXPECT_CONTAINS(error, "shape [3, 4] of BF16 needs 24 bytes");
}

TEST_F(SafetensorsTest, BadJson) {
  // Syntax errors carry nlohmann's reason; a duplicate key and deep nesting
  // are rejected while parsing; numbers and literals the parser accepts are
  // rejected by the field checks.
  std::string deep64 =
      "{\"a\":" + std::string(63, '[') + std::string(63, ']') + "}";
  std::string deep65 =
      "{\"a\":" + std::string(64, '[') + std::string(64, ']') + "}";
  const std::string json = "header is not valid JSON at header byte ";
  const std::string cases[][2] = {
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}",
       json + "54: syntax error while parsing object key - unexpected '}'; "
              "expected string literal"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}",
       "tensor 'a': shape contains a non-integer"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}",
       "tensor 'a': data_offsets is not an array of two integers"},
      {"{\"a\":{\"dtype\":\"F32",
       json + "18: syntax error while parsing value - invalid string: "
              "missing closing quote; last read: '\"F32'"},
      {"{} x", json + "3: syntax error while parsing value - invalid literal; "
                      "last read: '{} x'; expected end of input"},
      {"{\"a\" 1}", json + "5: syntax error while parsing object separator - "
                           "unexpected number literal; expected ':'"},
      {"{\"a\":true}", "tensor 'a': entry is not an object"},
      {"{\"a\":null}", "tensor 'a': entry is not an object"},
      {"{\"a\":[01]}",
       json + "7: syntax error while parsing array - unexpected number "
              "literal; expected ']'"},
      {"{\"a\":\"\\q\"}",
       json + "7: syntax error while parsing value - invalid string: "
              "forbidden character after backslash; last read: '\"\\q'"},
      {"{\"a\":1,\"a\":2}", json + "9: duplicate object key 'a'"},
      {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}",
       json + "26: duplicate object key 'dtype'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],"
       "\"data_offsets\":[0,4]}}",
       "tensor 'a': shape has a dimension that does not fit in 64 bits"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
       "\"data_offsets\":[0,9223372036854775808]}}",
       "tensor 'a': data_offsets has an offset that does not fit in 64 bits"},
      {"", json + "0: syntax error while parsing value - unexpected end of "
                  "input; expected '[', '{', or a literal"},
      {"{\"a\":\"\\ud800\"}",
       json + "12: syntax error while parsing value - invalid string: "
              "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF; "
              "last read: '\"\\ud800\"'"},
      {"{\"a\":\"\xff\"}",
       json + "6: syntax error while parsing value - invalid string: "
              "ill-formed UTF-8 byte; last read: '\"\xFF'"},
      {deep64, "tensor 'a': entry is not an object"},
      {deep65, json + "68: nesting deeper than 64"},
  };
  int n = 0;
  for (auto &c : cases) {
    std::string path =
        writeRaw("bad" + std::to_string(n++) + ".safetensors", c[0], 8);
    EXPECT_EQ(openError(path), path + ": " + c[1]);
  }
}

TEST_F(SafetensorsTest, HeaderNotAnObject) {
  std::string error = openError(writeRaw("arr.safetensors", "[1, 2]", 0));
  EXPECT_CONTAINS(error, "header is not a JSON object");
}

TEST_F(SafetensorsTest, BadDType) {
  std::string error =
      openError(writeRaw("dtype.safetensors",
                         "{\"layer.w\":{\"dtype\":\"F64\",\"shape\":[1],"
                         "\"data_offsets\":[0,8]}}",
                         8));
  EXPECT_CONTAINS(error, "tensor 'layer.w'");
  EXPECT_CONTAINS(error, "unsupported dtype 'F64'");
}

TEST_F(SafetensorsTest, BadFields) {
  struct Case {
    const char *entry;
    const char *message;
  } cases[] = {
      {"{\"shape\":[1],\"data_offsets\":[0,4]}", "missing field 'dtype'"},
      {"{\"dtype\":\"F32\",\"data_offsets\":[0,4]}", "missing field 'shape'"},
      {"{\"dtype\":\"F32\",\"shape\":[1]}", "missing field 'data_offsets'"},
      {"{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}",
       "negative dimension -1"},
      {"{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}",
       "shape contains a non-integer"},
      {"{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}",
       "data_offsets is not an array of two integers"},
      {"{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,4]}",
       "negative offset"},
      {"{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":[]}",
       "unknown field 'x'"},
      {"[]", "entry is not an object"},
      {"{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}",
       "dtype is not a string"},
      {"{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
       "\"data_offsets\":[0,4]}",
       "too large"},
  };
  int n = 0;
  for (const Case &c : cases) {
    std::string error =
        openError(writeRaw("field" + std::to_string(n++) + ".safetensors",
                           std::string("{\"the.tensor\":") + c.entry + "}", 8));
    EXPECT_CONTAINS(error, "tensor 'the.tensor'");
    EXPECT_CONTAINS(error, c.message);
  }
}

TEST_F(SafetensorsTest, BadMetadata) {
  std::string error = openError(
      writeRaw("meta.safetensors", "{\"__metadata__\":{\"k\":1}}", 0));
  EXPECT_CONTAINS(error, "__metadata__");
  EXPECT_CONTAINS(error, "'k'");
  error = openError(writeRaw("meta2.safetensors", "{\"__metadata__\":[]}", 0));
  EXPECT_CONTAINS(error, "__metadata__ is not an object");
}

TEST_F(SafetensorsTest, WriterErrors) {
  std::string error;
  {
    SafetensorsWriter writer;
    writer.addF32("dup", {1}, {1.0f});
    writer.addF32("dup", {1}, {2.0f});
    std::string path = file("dup.safetensors");
    EXPECT_FALSE(writer.write(path, &error));
    EXPECT_CONTAINS(error, "tensor 'dup' added twice");
    EXPECT_NE(access(path.c_str(), F_OK), 0);
    EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);
  }
  {
    SafetensorsWriter writer;
    writer.add("bytes", DType::F32, {2, 2}, std::vector<uint8_t>(12));
    EXPECT_FALSE(writer.write(file("bytes.safetensors"), &error));
    EXPECT_CONTAINS(error, "tensor 'bytes': 12 bytes given");
    EXPECT_CONTAINS(error, "needs 16 bytes");
  }
  {
    SafetensorsWriter writer;
    writer.addF32("ok", {1}, {1.0f});
    EXPECT_FALSE(writer.write(file("no/such/dir/out.safetensors"), &error));
    EXPECT_CONTAINS(error, "cannot create");
  }
  {
    // The reader rejects names that are not UTF-8, so the writer does too.
    SafetensorsWriter writer;
    writer.addF32("bad\xff", {1}, {1.0f});
    std::string path = file("utf8.safetensors");
    EXPECT_FALSE(writer.write(path, &error));
    EXPECT_CONTAINS(error, "name is not valid UTF-8");
    EXPECT_NE(access(path.c_str(), F_OK), 0);
  }
  {
    SafetensorsWriter writer;
    writer.setMetadata("k", "\xc3");
    EXPECT_FALSE(writer.write(file("utf8-meta.safetensors"), &error));
    EXPECT_CONTAINS(error, "__metadata__: value of 'k' is not valid UTF-8");
  }
}

TEST_F(SafetensorsTest, ErrorsStayOnOneLine) {
  // A tensor name with an escaped newline must not break the message.
  std::string error =
      openError(writeRaw("nl.safetensors",
                         "{\"bad\\nname\":{\"dtype\":\"F64\",\"shape\":[1],"
                         "\"data_offsets\":[0,8]}}",
                         8));
  EXPECT_CONTAINS(error, "tensor 'bad\\x0aname'");
}
