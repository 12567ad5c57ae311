#include "corpus.h"

#include <random>
#include <vector>

namespace memento::demo {
namespace {

const std::vector<std::string> kSubjects = {
    "the old keeper",   "a tired engineer", "the small robot", "my neighbour", "the night train",
    "every checkpoint", "the red fox",      "a quiet student", "the ship",     "our garden"};
const std::vector<std::string> kVerbs = {"remembers", "carries", "watches", "repairs",
                                         "forgets",   "copies",  "guards",  "finds"};
const std::vector<std::string> kObjects = {
    "the broken lamp", "a letter from home", "the last page",  "seven blue stones",
    "the lost key",    "a map of the coast", "the warm bread", "every missing shard"};
const std::vector<std::string> kEndings = {
    "before the storm",  "in the morning",  "without a word",        "near the river",
    "after the failure", "again and again", "at the end of the day", "with great care"};

}  // namespace

std::string GenerateCorpus(uint64_t seed, size_t bytes) {
  std::mt19937_64 rng(seed);
  auto pick = [&](const std::vector<std::string>& list) -> const std::string& {
    return list[rng() % list.size()];
  };
  std::string text;
  text.reserve(bytes + 128);
  while (text.size() < bytes) {
    std::string s = pick(kSubjects) + " " + pick(kVerbs) + " " + pick(kObjects);
    if (rng() % 2 == 0) s += " " + pick(kEndings);
    s[0] = static_cast<char>(s[0] - 'a' + 'A');
    s += rng() % 5 == 0 ? "!" : ".";
    s += rng() % 6 == 0 ? "\n" : " ";
    text += s;
  }
  return text;
}

}  // namespace memento::demo
