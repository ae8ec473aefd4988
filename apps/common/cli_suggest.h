// "Did you mean --flag?" for CLI11 programs (seedd, seedctl). Header-only, so
// the library itself does not depend on CLI11.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "suggest.h"

namespace seedd {

// Every long flag of `app` and its subcommands.
inline void LongFlagNames(const CLI::App* app, std::vector<std::string>* names) {
  for (const CLI::Option* opt : app->get_options()) {
    for (const std::string& n : opt->get_lnames()) names->push_back("--" + n);
  }
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
    LongFlagNames(sub, names);
  }
}

// `error` and, when an argument is a misspelling of a known flag, " (did you
// mean --FLAG?)".
inline std::string ExplainParseError(const CLI::App& app, const CLI::ParseError& error, int argc,
                                     char** argv) {
  std::string message = error.what();
  std::vector<std::string> known;
  LongFlagNames(&app, &known);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) continue;
    arg = arg.substr(0, arg.find('='));
    if (std::find(known.begin(), known.end(), arg) != known.end()) continue;
    if (std::string near = ClosestName(arg, known); !near.empty()) {
      return message + " (did you mean " + near + "?)";
    }
  }
  return message;
}

}  // namespace seedd
