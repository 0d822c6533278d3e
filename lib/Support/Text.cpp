//===- Text.cpp - Parsing the runtime's small text formats ----------------===//

#include "meshfold/Support/Text.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

using namespace meshfold;

bool meshfold::parseInt(const std::string &text, int64_t &out) {
  if (text.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno || *end)
    return false;
  out = v;
  return true;
}

bool meshfold::parseUnsignedInt(const std::string &text, int64_t &out) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  return parseInt(text, out);
}

bool meshfold::parseDouble(const std::string &text, double &out) {
  if (text.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (errno || *end)
    return false;
  out = v;
  return true;
}

std::vector<std::string> meshfold::split(const std::string &text, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::stringstream ss(text);
  while (std::getline(ss, item, sep))
    out.push_back(item);
  if (!text.empty() && text.back() == sep)
    out.push_back("");
  return out;
}
