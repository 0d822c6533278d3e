//===- Connection.cpp - A client's connection, closed or not --------------===//

#include "mfrt/serve/Connection.h"

#include <cerrno>
#include <cstdlib>

#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>

using namespace mfrt::serve;

namespace {
/// The numeric host and port of `addr`, as cpp-httplib writes them
/// (getnameinfo with NI_NUMERICHOST); false for a socket that is not IP.
bool hostAndPort(const sockaddr_storage &addr, socklen_t len, std::string &host,
                 int &port) {
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6)
    return false;
  char name[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr *>(&addr), len, name,
                  sizeof(name), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = name;
  port = std::atoi(serv);
  return true;
}

/// Whether open descriptor `fd` is the socket of the connection `ends`.
bool isConnection(int fd, const ConnectionEnds &ends) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  std::string host;
  int port = -1;
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0 ||
      !hostAndPort(addr, len, host, port) || port != ends.localPort)
    return false;
  len = sizeof(addr);
  return getpeername(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0 &&
         hostAndPort(addr, len, host, port) && port == ends.remotePort &&
         host == ends.remoteAddr;
}
} // namespace

int mfrt::serve::findConnectionSocket(const ConnectionEnds &ends) {
  if (ends.remotePort < 0 || ends.localPort < 0)
    return -1;
  DIR *dir = opendir("/proc/self/fd");
  if (!dir)
    return -1;
  int found = -1;
  while (dirent *entry = readdir(dir)) {
    char *end = nullptr;
    long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end || fd == dirfd(dir))
      continue;
    if (isConnection(int(fd), ends)) {
      found = int(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool mfrt::serve::peerClosed(int fd) {
  char byte;
  ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0)
    return false;
  return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}
