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
  // A command word that is none of the subcommands: the nearest, or the list.
  const auto subs = app.get_subcommands([](const CLI::App*) { return true; });
  if (!subs.empty() && argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : subs) names.push_back(sub->get_name());
    const std::string word = argv[1];
    if (std::find(names.begin(), names.end(), word) == names.end()) {
      std::string near = ClosestName(word, names);
      for (const std::string& n : names) {  // a command cut short: "pul"
        if (near.empty() && word.size() >= 2 && n.rfind(word, 0) == 0) near = n;
      }
      if (!near.empty()) return "unknown command '" + word + "' (did you mean " + near + "?)";
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      return "unknown command '" + word + "'; the commands: " + list;
    }
  }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    // "-source": a long flag given one dash.
    if (arg.size() > 2 && arg[0] == '-' && arg[1] != '-') {
      const std::string two = "-" + arg.substr(0, arg.find('='));
      if (std::find(known.begin(), known.end(), two) != known.end()) {
        return "'" + arg.substr(0, arg.find('=')) + "' takes two dashes: " + two;
      }
    }
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
