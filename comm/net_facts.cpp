#include "comm/net_facts.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <optional>
#include <sstream>
#include <type_traits>

namespace ringstep {
namespace {

// The file's text, "" when it cannot be read. With read(2), not a stream: sysfs answers
// EINVAL for the speed of a link that is down, which libstdc++'s filebuf turns into an
// exception whatever the stream's exception mask.
std::string read_small_file(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) text.append(buf, size_t(n));
  close(fd);
  return n < 0 ? "" : text;
}

bool in_subnet(uint32_t addr, uint32_t net, int prefix_len) {
  const uint32_t mask = prefix_len <= 0 ? 0 : ~uint32_t{0} << (32 - std::min(prefix_len, 32));
  return (addr & mask) == (net & mask);
}

// "10.213.0.0/24" -> (address, 24); nullopt when TEXT is not an IPv4 CIDR.
std::optional<std::pair<uint32_t, int>> parse_cidr(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return std::nullopt;
  in_addr a{};
  if (inet_pton(AF_INET, text.substr(0, slash).c_str(), &a) != 1) return std::nullopt;
  char* end = nullptr;
  const long len = std::strtol(text.c_str() + slash + 1, &end, 10);
  if (*end != '\0' || end == text.c_str() + slash + 1 || len < 0 || len > 32) return std::nullopt;
  return std::make_pair(ntohl(a.s_addr), int(len));
}

// The rtnetlink dump of TYPE (RTM_GETQDISC or RTM_GETTCLASS) for IFINDEX, parsed; nullopt
// when the kernel cannot be asked (no netlink socket, an error answer, a timeout).
std::optional<std::vector<TcEntry>> tc_dump(uint16_t type, int ifindex) {
  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return std::nullopt;
  timeval timeout{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  struct {
    nlmsghdr nh;
    tcmsg tc;
  } req{};
  req.nh.nlmsg_len = sizeof req;
  req.nh.nlmsg_type = type;
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.nh.nlmsg_seq = 1;
  req.tc.tcm_family = AF_UNSPEC;
  req.tc.tcm_ifindex = ifindex;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  std::vector<TcEntry> out;
  bool done = false, failed = sendto(fd, &req, sizeof req, 0, reinterpret_cast<sockaddr*>(&kernel),
                                     sizeof kernel) < 0;
  std::vector<char> buf(size_t{1} << 16);
  while (!done && !failed) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) {
      failed = true;
      break;
    }
    int len = int(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, len);
         h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type == NLMSG_DONE) done = true;
      if (h->nlmsg_type == NLMSG_ERROR) failed = true;
    }
    const std::vector<TcEntry> part = parse_tc_dump(buf.data(), size_t(n));
    out.insert(out.end(), part.begin(), part.end());
  }
  close(fd);
  if (failed) return std::nullopt;
  return out;
}

template <class T>
T read_as(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// tbf's rate (TCA_TBF_RATE64 when the rate needs 64 bits), or an htb class's ceiling.
double rate_of(const std::string& kind, const rtattr* options, int len) {
  uint64_t rate = 0, rate64 = 0;
  for (const rtattr* a = options; RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    const void* p = RTA_DATA(a);
    const size_t n = RTA_PAYLOAD(a);
    if (kind == "tbf" && a->rta_type == TCA_TBF_PARMS && n >= sizeof(tc_tbf_qopt))
      rate = read_as<tc_tbf_qopt>(p).rate.rate;
    else if (kind == "tbf" && a->rta_type == TCA_TBF_RATE64 && n >= 8)
      rate64 = read_as<uint64_t>(p);
    else if (kind == "htb" && a->rta_type == TCA_HTB_PARMS && n >= sizeof(tc_htb_opt))
      rate = read_as<tc_htb_opt>(p).ceil.rate;
    else if (kind == "htb" && a->rta_type == TCA_HTB_CEIL64 && n >= 8)
      rate64 = read_as<uint64_t>(p);
  }
  return double(rate64 > 0 ? rate64 : rate);
}

// What one host tells the others about itself: its addresses, sorted. Gathered as bytes.
constexpr size_t kMaxAddrs = 15;
struct AddrSet {
  uint32_t count = 0;
  uint32_t addr[kMaxAddrs] = {};
  bool operator==(const AddrSet& o) const {
    return count == o.count && std::equal(addr, addr + count, o.addr);
  }
};

// The interface the kernel would send to PEER from (a UDP connect sends nothing), or "".
std::string routed_interface(uint32_t peer) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);  // discard; nothing is sent
  to.sin_addr.s_addr = htonl(peer);
  sockaddr_in from{};
  socklen_t from_len = sizeof from;
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&from), &from_len) == 0;
  close(fd);
  if (!ok) return "";
  for (const IfAddr& a : interface_addresses())
    if (a.addr == ntohl(from.sin_addr.s_addr)) return a.name;
  return "";
}

// One rank's facts as bytes: the name in IFNAMSIZ characters, as the kernel bounds it.
struct NetFactsWire {
  char interface[IFNAMSIZ] = {};
  NetSnapshot start, end;
};
static_assert(std::is_trivially_copyable_v<NetFactsWire>);

}  // namespace

std::vector<IfAddr> interface_addresses() {
  std::vector<IfAddr> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !i->ifa_netmask) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    const uint32_t addr = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
    const uint32_t mask =
        ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
    out.push_back({i->ifa_name, addr, __builtin_popcount(mask)});
  }
  freeifaddrs(list);
  return out;
}

std::vector<IfAddr> filter_if_include(const std::vector<IfAddr>& addrs, const std::string& spec) {
  if (spec.empty()) return addrs;
  std::vector<IfAddr> out;
  std::stringstream items(spec);
  std::vector<std::string> names;
  for (std::string item; std::getline(items, item, ',');)
    if (!item.empty()) names.push_back(item);
  for (const IfAddr& a : addrs) {
    const bool kept = std::any_of(names.begin(), names.end(), [&](const std::string& n) {
      const auto cidr = parse_cidr(n);
      return cidr ? in_subnet(a.addr, cidr->first, cidr->second) : n == a.name;
    });
    if (kept) out.push_back(a);
  }
  return out;
}

std::string subnet_interface(const std::vector<IfAddr>& mine, const std::vector<uint32_t>& peers) {
  std::string best;
  size_t best_count = 0;
  for (const IfAddr& a : mine) {
    const size_t n = size_t(std::count_if(peers.begin(), peers.end(), [&](uint32_t p) {
      return in_subnet(p, a.addr, a.prefix_len);
    }));
    if (n > best_count) best = a.name, best_count = n;
  }
  return best;
}

TcpCounters parse_proc_net_snmp(const std::string& text) {
  // Two "Tcp:" lines: the field names, then their values.
  std::istringstream in(text);
  std::vector<std::string> names;
  TcpCounters c;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Tcp:", 0) != 0) continue;
    std::istringstream fields(line.substr(4));
    std::vector<std::string> words{std::istream_iterator<std::string>(fields), {}};
    if (names.empty()) {
      names = std::move(words);
      continue;
    }
    for (size_t i = 0; i < std::min(names.size(), words.size()); ++i) {
      const int64_t v = parse_sys_integer(words[i]);
      if (names[i] == "OutSegs") c.out_segs = v;
      if (names[i] == "RetransSegs") c.retrans_segs = v;
    }
    break;
  }
  return c;
}

int64_t parse_sys_integer(const std::string& text) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  if (end == s || errno != 0 || v < 0) return -1;
  while (*end == '\n' || *end == ' ') ++end;
  return *end == '\0' ? int64_t(v) : -1;
}

std::vector<TcEntry> parse_tc_dump(const void* data, size_t bytes) {
  std::vector<TcEntry> out;
  int len = int(std::min<size_t>(bytes, 1u << 30));
  for (auto* h = static_cast<const nlmsghdr*>(data); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
    if (h->nlmsg_type != RTM_NEWQDISC && h->nlmsg_type != RTM_NEWTCLASS) continue;
    if (h->nlmsg_len < NLMSG_LENGTH(sizeof(tcmsg))) continue;
    const auto tc = read_as<tcmsg>(NLMSG_DATA(h));
    TcEntry e;
    e.ifindex = tc.tcm_ifindex;
    e.parent = tc.tcm_parent;
    int alen = int(h->nlmsg_len - NLMSG_LENGTH(sizeof(tcmsg)));
    const rtattr* options = nullptr;
    int options_len = 0;
    for (auto* a = reinterpret_cast<const rtattr*>(static_cast<const char*>(NLMSG_DATA(h)) +
                                                   NLMSG_ALIGN(sizeof(tcmsg)));
         RTA_OK(a, alen); a = RTA_NEXT(a, alen)) {
      if (a->rta_type == TCA_KIND)
        e.kind.assign(static_cast<const char*>(RTA_DATA(a)),
                      strnlen(static_cast<const char*>(RTA_DATA(a)), RTA_PAYLOAD(a)));
      if (a->rta_type == TCA_OPTIONS)
        options = static_cast<const rtattr*>(RTA_DATA(a)), options_len = int(RTA_PAYLOAD(a));
    }
    if (options) e.rate_bytes_per_s = rate_of(e.kind, options, options_len);
    out.push_back(std::move(e));
  }
  return out;
}

double root_cap_gbps(const std::vector<TcEntry>& qdiscs, const std::vector<TcEntry>& classes,
                     int ifindex) {
  const auto root = std::find_if(qdiscs.begin(), qdiscs.end(), [&](const TcEntry& q) {
    return q.ifindex == ifindex && q.parent == TC_H_ROOT;
  });
  if (root == qdiscs.end()) return NetSnapshot::kNaN;
  double bytes_per_s = 0;
  if (root->kind == "tbf") bytes_per_s = root->rate_bytes_per_s;
  if (root->kind == "htb")
    for (const TcEntry& c : classes)
      if (c.ifindex == ifindex && c.parent == TC_H_ROOT) bytes_per_s += c.rate_bytes_per_s;
  return bytes_per_s * 8 / 1e9;
}

NetSnapshot read_net_snapshot(const std::string& interface, const NetPaths& paths) {
  NetSnapshot s;
  if (interface.empty()) return s;
  const TcpCounters tcp = parse_proc_net_snmp(read_small_file(paths.proc_net_snmp));
  s.tcp_out_segs = tcp.out_segs, s.tcp_retrans_segs = tcp.retrans_segs;
  const std::string dir = paths.sys_class_net + "/" + interface + "/";
  const int64_t mbps = parse_sys_integer(read_small_file(dir + "speed"));
  if (mbps > 0) s.link_gbps = double(mbps) / 1000;
  const auto stat = [&](const char* name) {
    return parse_sys_integer(read_small_file(dir + "statistics/" + name));
  };
  s.tx_bytes = stat("tx_bytes"), s.rx_bytes = stat("rx_bytes");
  s.tx_dropped = stat("tx_dropped"), s.rx_dropped = stat("rx_dropped");
  s.tx_errors = stat("tx_errors"), s.rx_errors = stat("rx_errors");
  if (const int ifindex = int(if_nametoindex(interface.c_str())); ifindex > 0) {
    const auto qdiscs = tc_dump(RTM_GETQDISC, ifindex);
    const auto classes = tc_dump(RTM_GETTCLASS, ifindex);
    if (qdiscs && classes) s.cap_gbps = root_cap_gbps(*qdiscs, *classes, ifindex);
  }
  return s;
}

std::string traffic_interface(int rank, int world, const AllgatherBytes& allgather) {
  const char* spec = std::getenv("OMPI_MCA_btl_tcp_if_include");
  const std::vector<IfAddr> usable = filter_if_include(interface_addresses(), spec ? spec : "");
  AddrSet mine;
  for (const IfAddr& a : usable)
    if (mine.count < kMaxAddrs) mine.addr[mine.count++] = a.addr;
  std::sort(mine.addr, mine.addr + mine.count);
  std::vector<AddrSet> all(static_cast<size_t>(world));
  all[size_t(rank)] = mine;
  allgather(all.data(), sizeof(AddrSet));
  std::vector<uint32_t> peers;  // addresses of ranks on other hosts
  for (const AddrSet& s : all)
    if (!(s == mine)) peers.insert(peers.end(), s.addr, s.addr + s.count);
  if (peers.empty()) return "";
  const std::string by_subnet = subnet_interface(usable, peers);
  return by_subnet.empty() ? routed_interface(peers.front()) : by_subnet;
}

std::vector<NetFacts> gather_net_facts(const NetFacts& facts, int rank, int world,
                                       const AllgatherBytes& allgather) {
  std::vector<NetFactsWire> all(static_cast<size_t>(world));
  NetFactsWire& mine = all[size_t(rank)];
  std::strncpy(mine.interface, facts.interface.c_str(), IFNAMSIZ - 1);
  mine.start = facts.start, mine.end = facts.end;
  allgather(all.data(), sizeof(NetFactsWire));
  std::vector<NetFacts> out;
  for (const NetFactsWire& w : all)
    out.push_back({std::string(w.interface, strnlen(w.interface, IFNAMSIZ)), w.start, w.end});
  return out;
}

}  // namespace ringstep
