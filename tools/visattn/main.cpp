// visattn: information, correctness check and benchmark of the library's backends.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "commands.h"
#include "visattn/error.h"

int main(int argc, char** argv) {
  using namespace visattn::cli;
  CLI::App app{"visattn: attention for vision encoders"};
  app.require_subcommand(1);

  InfoOptions info;
  auto* info_cmd = app.add_subcommand("info", "Build options, CPU features, GPUs and backends");
  info_cmd->add_flag("--json", info.json, "Print JSON");

  CheckOptions check;
  auto* check_cmd = app.add_subcommand("check", "Random varlen cases against the fp64 oracle");
  check_cmd->add_option("--backend", check.backend, "Backend to check")->capture_default_str();
  check_cmd->add_option("--cases", check.cases, "Number of cases")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  check_cmd->add_option("--seed", check.seed, "Seed of the case suite")->capture_default_str();
  check_cmd->add_option("--case", check.only_case, "Run only this case index of the suite")
      ->check(CLI::NonNegativeNumber);
  check_cmd->add_flag("--verbose,-v", check.verbose, "Print every case");

  BenchOptions bench;
  auto* bench_cmd = app.add_subcommand("bench", "Time backends on a workload suite");
  bench_cmd->add_option("--backend", bench.backend, "Backend name, auto or all")
      ->capture_default_str();
  bench_cmd->add_option("--workloads", bench.workloads_file,
                        "Workload suite JSON (default: ../shared/workloads.json)");
  bench_cmd->add_option("--scale", bench.scale,
                        "Fraction of each workload's FLOPs to run (0 < F <= 1), or auto")
      ->capture_default_str();
  bench_cmd->add_option("--budget", bench.budget_seconds,
                        "Seconds per backend that --scale auto aims at")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench_cmd->add_option("--dtype", bench.dtypes, "Comma-separated dtypes: bf16,f16,f32")
      ->capture_default_str();
  bench_cmd->add_option("--json", bench.json_file, "Write results as JSON to this file");
  bench_cmd->add_flag("!--no-layer", bench.layer,
                      "Time attention only, not also the whole attention layer around it");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*info_cmd) return run_info(info);
    if (*check_cmd) return run_check(check);
    if (*bench_cmd) return run_bench(bench);
  } catch (const visattn::Error& e) {
    std::fprintf(stderr, "visattn: error (%s): %s\n", visattn::error_code_name(e.code()),
                 e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "visattn: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
