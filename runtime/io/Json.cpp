//===- Json.cpp - JSON of bounded depth -----------------------------------===//
//
// Part of the meshfold project.
//
//===----------------------------------------------------------------------===//

#include "mfrt/io/Json.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

using namespace mfrt;

bool mfrt::parseJson(const std::string &text, nlohmann::json &out,
                     std::string &error) {
  bool tooDeep = false;
  auto limit = [&](int depth, nlohmann::json::parse_event_t event,
                   nlohmann::json &) {
    if ((event == nlohmann::json::parse_event_t::object_start ||
         event == nlohmann::json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      tooDeep = true;
    // Everything below the limit is discarded as it is read.
    return depth < kMaxJsonDepth;
  };
  try {
    out = nlohmann::json::parse(text, limit, /*allow_exceptions=*/true);
  } catch (const nlohmann::json::parse_error &e) {
    // nlohmann's message: "[json.exception.parse_error.101] parse error at
    // line L, column C: <reason>"; the reason and the byte are kept.
    std::string what = e.what();
    size_t colon = what.find(": ");
    error = (colon == std::string::npos ? what : what.substr(colon + 2)) +
            " (byte " + std::to_string(e.byte > 0 ? e.byte - 1 : 0) + ")";
    return false;
  } catch (const nlohmann::json::exception &e) {
    std::string what = e.what();
    size_t close = what.find("] ");
    error = close == std::string::npos ? what : what.substr(close + 2);
    return false;
  }
  if (tooDeep) {
    error = "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return false;
  }
  return true;
}

bool mfrt::readWholeFile(const std::string &path, std::string &out,
                         std::string &error) {
  out.clear();
  std::FILE *in = std::fopen(path.c_str(), "rb");
  if (!in) {
    error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  char buffer[65536];
  while (true) {
    size_t n = std::fread(buffer, 1, sizeof(buffer), in);
    out.append(buffer, n);
    if (n < sizeof(buffer))
      break;
  }
  bool readError = std::ferror(in) != 0;
  int savedErrno = errno;
  std::fclose(in);
  if (readError) {
    error = path + ": cannot read: " + std::strerror(savedErrno);
    return false;
  }
  return true;
}

bool mfrt::writeWholeFile(const std::string &path, const std::string &text,
                          std::string &error) {
  std::string tmp = path + ".tmp";
  std::FILE *out = std::fopen(tmp.c_str(), "wb");
  if (!out) {
    error = tmp + ": cannot create: " + std::strerror(errno);
    return false;
  }
  bool ok = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  ok = std::fclose(out) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    int saved = errno;
    std::remove(tmp.c_str());
    error = path + ": cannot write: " + std::strerror(saved);
    return false;
  }
  return true;
}
