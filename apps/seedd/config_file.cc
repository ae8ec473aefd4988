#include "config_file.h"

#include <toml++/toml.h>

#include <algorithm>

#include "suggest.h"

namespace seedd {
namespace {

std::string Where(const std::filesystem::path& file, const toml::source_region& at,
                  const std::string& key) {
  return file.string() + ":" + std::to_string(at.begin.line) + ": key '" + key + "'";
}

// A scalar as a command-line value; nullopt for tables, arrays and dates.
std::optional<std::string> Scalar(const toml::node& v) {
  if (auto s = v.as_string()) return s->get();
  if (auto i = v.as_integer()) return std::to_string(i->get());
  if (auto f = v.as_floating_point()) {
    std::ostringstream out;
    out << f->get();
    return out.str();
  }
  return std::nullopt;
}

}  // namespace

Result<std::vector<ConfigEntry>> ReadConfigFile(const std::filesystem::path& file,
                                                const CLI::App& app) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  if (ec) return Status::InvalidArgument(file.string() + ": " + ec.message());
  if (size > kMaxConfigBytes) {
    return Status::InvalidArgument(file.string() + ": " + std::to_string(size) +
                                   " bytes; a configuration file holds at most 1 MiB");
  }
  toml::table root;
  try {
    root = toml::parse_file(file.string());
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    if (at.line == 0) {
      return Status::InvalidArgument(file.string() + ": " + std::string(e.description()));
    }
    return Status::InvalidArgument(file.string() + ":" + std::to_string(at.line) + ":" +
                                   std::to_string(at.column) + ": " + std::string(e.description()));
  }
  std::vector<std::string> known;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& n : opt->get_lnames()) {
      if (n != "config" && n != "help" && n != "version") known.push_back(n);
    }
  }
  std::vector<ConfigEntry> entries;
  for (const auto& [raw_key, value] : root) {
    const std::string key(raw_key.str());
    const std::string where = Where(file, raw_key.source(), key);
    std::string name = key;
    std::replace(name.begin(), name.end(), '_', '-');
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string message = where + ": unknown key";
      if (value.is_table()) {
        message = where + ": a table; settings are top-level keys (no [sections])";
      } else if (name == "config" || name == "help" || name == "version") {
        message = where + ": not a setting of the file";
      } else if (std::string near = ClosestName(name, known); !near.empty()) {
        message += " (did you mean '" + near + "'?)";
      } else {
        message += " (the keys are the long flags of seedd --help, without '--')";
      }
      return Status::InvalidArgument(message);
    }
    const CLI::Option* opt = app.get_option("--" + name);
    const bool is_flag = opt->get_expected_max() == 0;
    const bool repeatable = opt->get_expected_max() > 1;
    ConfigEntry entry{"--" + name, {}, where};
    if (auto b = value.as_boolean()) {
      if (!is_flag) return Status::InvalidArgument(where + ": expects a value, not true or false");
      if (b->get()) entry.args.push_back(entry.flag);
      if (!entry.args.empty()) entries.push_back(std::move(entry));
      continue;
    }
    if (is_flag) return Status::InvalidArgument(where + ": expects true or false");
    if (auto array = value.as_array()) {
      if (!repeatable) {
        return Status::InvalidArgument(where + ": takes one value, not an array");
      }
      for (const toml::node& item : *array) {
        std::optional<std::string> text = Scalar(item);
        if (!text) {
          return Status::InvalidArgument(where +
                                         ": an array of strings or numbers is expected here");
        }
        entry.args.push_back(entry.flag);
        entry.args.push_back(*text);
      }
      if (!entry.args.empty()) entries.push_back(std::move(entry));
      continue;
    }
    std::optional<std::string> text = Scalar(value);
    if (!text) {
      return Status::InvalidArgument(where + ": expects a string or a number" +
                                     (repeatable ? " (or an array of them)" : ""));
    }
    entry.args = {entry.flag, *text};
    entries.push_back(std::move(entry));
  }
  return entries;
}

}  // namespace seedd
