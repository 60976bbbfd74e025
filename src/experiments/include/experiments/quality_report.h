// Copyright kvserve authors. How `kvserve quality` prints a QualityReport
// (kvserve/quality.h). Not part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_QUALITY_REPORT_H_
#define KVSERVE_EXPERIMENTS_QUALITY_REPORT_H_

#include <string>

#include "kvserve/kv.h"
#include "kvserve/quality.h"

namespace kvserve::lab {

// "12.3%", or "n/a" for a value that is not finite.
std::string Percent(double fraction);

// The report as lines: workload, profile and samples; the metric
// (perplexity, else exact match) beside the uncompressed run's; relative
// quality with its 95% CI; token accuracy; CR against `wire_dtype`; codec
// milliseconds per sample; prefills and seconds.
std::string QualityReportText(const QualityReport& r, DType wire_dtype);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_QUALITY_REPORT_H_
