//===- Text.cpp - Parsing the runtime's small text formats ----------------===//

#include "meshfold/Support/Text.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

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

int64_t meshfold::parseByteSize(const std::string &text) {
  static const std::pair<const char *, double> kUnits[] = {
      {"GiB", double(1ull << 30)},
      {"MiB", double(1ull << 20)},
      {"KiB", double(1ull << 10)},
      {"GB", 1e9},
      {"MB", 1e6},
      {"KB", 1e3},
      {"B", 1}};
  std::string number = text;
  while (!number.empty() && number.back() == ' ')
    number.pop_back();
  double scale = 1;
  for (const auto &[unit, mult] : kUnits) {
    size_t n = std::strlen(unit);
    if (number.size() > n && number.compare(number.size() - n, n, unit) == 0) {
      number.resize(number.size() - n);
      scale = mult;
      break;
    }
  }
  size_t first = number.find_first_not_of(' ');
  number = first == std::string::npos ? "" : number.substr(first);
  while (!number.empty() && number.back() == ' ')
    number.pop_back();
  double value = 0;
  if (!parseDouble(number, value) || !(value > 0) || value * scale >= 9.2e18)
    return -1;
  return int64_t(value * scale);
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
