// Copyright kvserve authors. How `kvserve quality` prints a QualityReport
// (kvserve/quality.h). Not part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_QUALITY_REPORT_H_
#define KVSERVE_EXPERIMENTS_QUALITY_REPORT_H_

#include <string>
#include <vector>

#include "kvserve/kv.h"
#include "kvserve/quality.h"

namespace kvserve::lab {

// One profile through `evaluator` on `samples` with `o` (its head_scores
// replaced by those loaded from `head_scores_path`, which the mixhq / duo
// profiles need: InvalidArgument saying how to get a file when none is
// given, or when the file is for another shape than the model's KV).
Result<QualityReport> EvaluateQualityProfile(QualityEvaluator& evaluator,
                                             const std::vector<EvalSample>& samples,
                                             const Profile& profile,
                                             const std::string& head_scores_path, QualityOptions o);

// "12.3%", or "n/a" for a value that is not finite.
std::string Percent(double fraction);

// The report as lines: workload, profile and samples; the metric
// (perplexity, else exact match) beside the uncompressed run's; relative
// quality with its 95% CI; token accuracy; CR against `wire_dtype`; codec
// milliseconds per sample; prefills and seconds.
std::string QualityReportText(const QualityReport& r, DType wire_dtype);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_QUALITY_REPORT_H_
