// Copyright kvserve authors. The 3D Pareto frontier (paper §5.2.3) and the
// profile tables built from it.
#include <algorithm>
#include <numeric>

#include "kvserve/profiler.h"

namespace kvserve {

bool Dominates(const ParetoPoint& a, const ParetoPoint& b) {
  const bool no_worse = a.quality >= b.quality && a.compression_ratio >= b.compression_ratio &&
                        a.codec_seconds_per_byte <= b.codec_seconds_per_byte;
  const bool better = a.quality > b.quality || a.compression_ratio > b.compression_ratio ||
                      a.codec_seconds_per_byte < b.codec_seconds_per_byte;
  return no_worse && better;
}

std::vector<int> NonDominated(std::span<const ParetoPoint> points) {
  // In lexicographic order (quality desc, CR desc, time asc) every dominator
  // of a point precedes it, and dominance is transitive, so comparing each
  // point with the front kept so far is enough.
  std::vector<int> order(points.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const ParetoPoint& p = points[a];
    const ParetoPoint& q = points[b];
    if (p.quality != q.quality) return p.quality > q.quality;
    if (p.compression_ratio != q.compression_ratio) {
      return p.compression_ratio > q.compression_ratio;
    }
    return p.codec_seconds_per_byte < q.codec_seconds_per_byte;
  });
  std::vector<int> front;
  for (int i : order) {
    bool dominated = false;
    for (int f : front) {
      if (Dominates(points[f], points[i])) {
        dominated = true;
        break;
      }
    }
    if (!dominated) front.push_back(i);
  }
  std::sort(front.begin(), front.end());
  return front;
}

Result<ProfileTable> BuildParetoTable(std::span<const TableEntry> entries,
                                      std::string_view workload, double quality_min) {
  std::vector<int> feasible;
  std::vector<ParetoPoint> points;
  for (size_t i = 0; i < entries.size(); ++i) {
    const TableEntry& e = entries[i];
    auto it = e.quality.find(std::string(workload));
    if (it == e.quality.end() || it->second < quality_min) continue;
    if (!(e.codec.compression_ratio > 1.0)) continue;
    feasible.push_back(static_cast<int>(i));
    points.push_back({it->second, e.codec.compression_ratio, e.codec.CodecSecondsPerByte()});
  }
  if (feasible.empty()) {
    return Status::InvalidArgument("no profile reaches quality " + std::to_string(quality_min) +
                                   " on \"" + std::string(workload) + "\"");
  }
  std::vector<ProfileCost> rows;
  for (int k : NonDominated(points)) {
    const TableEntry& e = entries[feasible[k]];
    ProfileCost row;
    row.spec = e.profile.ToString();
    row.compression_ratio = e.codec.compression_ratio;
    row.encode_bytes_per_second = e.codec.encode_bytes_per_second;
    row.decode_bytes_per_second = e.codec.decode_bytes_per_second;
    row.overhead_seconds = e.codec.overhead_seconds;
    for (const auto& [w, q] : e.quality) row.quality[w] = q;
    rows.push_back(std::move(row));
  }
  // Highest CR first: the order a reader scans a table in.
  std::stable_sort(rows.begin(), rows.end(), [](const ProfileCost& a, const ProfileCost& b) {
    return a.compression_ratio > b.compression_ratio;
  });
  return ProfileTable::FromRows(std::move(rows));
}

}  // namespace kvserve
