// The Anthropic Messages API, tools through a real tool-calling template, and /metrics, over real loopback
// HTTP with the demo model: a message whole and streamed (events in Anthropic's order, the same text either
// way), stop sequences reported as such, count_tokens, Anthropic-shaped errors; tools and tool-call histories
// rendered by Gemma 4's template from both APIs; Prometheus metrics that count what was served.
#include "served.h"

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <thread>

namespace lmx {
namespace {

nlohmann::json message_body(const std::string& text, int max_tokens = 12) {
  return {{"model", "demo"},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"messages", {{{"role", "user"}, {"content", text}}}}};
}

std::string text_of(const nlohmann::json& message) {
  std::string text;
  for (const auto& block : message["content"])
    if (block["type"] == "text") text += block["text"].get<std::string>();
  return text;
}

TEST(MessagesApi, WholeAndStreamedAgree) {
  Served s;
  auto c = s.client();
  int status = 0;
  const nlohmann::json whole = post_json(c, "/v1/messages", message_body("Tell me a riddle."), &status);
  ASSERT_EQ(status, 200) << whole.dump();
  EXPECT_EQ(whole["type"], "message");
  EXPECT_EQ(whole["role"], "assistant");
  EXPECT_EQ(whole["model"], "demo");
  EXPECT_EQ(whole["id"].get<std::string>().rfind("msg", 0), 0u);
  const std::string text = text_of(whole);
  EXPECT_FALSE(text.empty());
  EXPECT_TRUE(whole["stop_reason"] == "end_turn" || whole["stop_reason"] == "max_tokens") << whole.dump();
  EXPECT_GT(whole["usage"]["input_tokens"].get<int>(), 0);
  EXPECT_GT(whole["usage"]["output_tokens"].get<int>(), 0);

  nlohmann::json body = message_body("Tell me a riddle.");
  body["stream"] = true;
  auto r = c.Post("/v1/messages", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const auto events = named_events(r->body);
  ASSERT_GE(events.size(), 5u);
  EXPECT_EQ(events.front().first, "message_start");
  EXPECT_EQ(events.front().second["message"]["content"], nlohmann::json::array());
  EXPECT_EQ(events[1].first, "content_block_start");
  EXPECT_EQ(events[1].second["content_block"]["type"], "text");
  EXPECT_EQ(events[events.size() - 3].first, "content_block_stop");
  EXPECT_EQ(events[events.size() - 2].first, "message_delta");
  EXPECT_EQ(events[events.size() - 2].second["delta"]["stop_reason"], whole["stop_reason"]);
  EXPECT_EQ(events[events.size() - 2].second["usage"]["output_tokens"], whole["usage"]["output_tokens"]);
  EXPECT_EQ(events.back().first, "message_stop");
  std::string streamed;
  for (const auto& [name, data] : events) {
    EXPECT_EQ(data["type"], name) << "each event's type is its name";
    if (name == "content_block_delta") streamed += data["delta"]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, text);
  // The same prompt again reads its KV from the prefix cache; count_tokens counts the same prompt.
  const nlohmann::json again = post_json(c, "/v1/messages", message_body("Tell me a riddle."), &status);
  EXPECT_GT(again["usage"]["cache_read_input_tokens"].get<int>(), 0);
  nlohmann::json count_body = message_body("Tell me a riddle.");
  count_body.erase("max_tokens");
  const nlohmann::json count = post_json(c, "/v1/messages/count_tokens", count_body, &status);
  EXPECT_EQ(status, 200) << count.dump();
  EXPECT_EQ(count["input_tokens"].get<int>(),
            again["usage"]["input_tokens"].get<int>() + again["usage"]["cache_read_input_tokens"].get<int>());
}

TEST(MessagesApi, StopSequenceIsReported) {
  Served s(HttpServerOptions{}, /*stop_tokens=*/false);
  auto c = s.client();
  int status = 0;
  const std::string full =
      text_of(post_json(c, "/v1/messages", message_body("Once upon a time", 24), &status));
  ASSERT_GE(full.size(), 12u) << full;
  const std::string stop = full.substr(6, 4);
  nlohmann::json body = message_body("Once upon a time", 24);
  body["stop_sequences"] = {"\x01never", stop};
  const nlohmann::json stopped = post_json(c, "/v1/messages", body, &status);
  ASSERT_EQ(status, 200) << stopped.dump();
  EXPECT_EQ(stopped["stop_reason"], "stop_sequence");
  EXPECT_EQ(stopped["stop_sequence"], stop);
  EXPECT_EQ(text_of(stopped), full.substr(0, full.find(stop)));
  body["stream"] = true;
  auto r = c.Post("/v1/messages", body.dump(), "application/json");
  ASSERT_TRUE(r);
  const auto events = named_events(r->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2].second["delta"]["stop_sequence"], stop);
}

TEST(MessagesApi, BadRequestsGetAnthropicErrors) {
  HttpServerOptions o;
  o.api_key = "secret";
  Served s(o);
  auto c = s.client();
  const httplib::Headers key = {{"x-api-key", "secret"}, {"anthropic-version", "2023-06-01"}};
  int status = 0;
  const nlohmann::json refused = post_json(c, "/v1/messages", message_body("hi"), &status);
  EXPECT_EQ(status, 401);
  EXPECT_EQ(refused["type"], "error");
  EXPECT_EQ(refused["error"]["type"], "authentication_error");
  nlohmann::json no_max = message_body("hi");
  no_max.erase("max_tokens");
  nlohmann::json image = message_body("hi");
  image["messages"][0]["content"] = {{{"type", "image"}, {"source", {{"type", "base64"}}}}};
  nlohmann::json forced = message_body("hi");
  forced["tool_choice"] = {{"type", "any"}};
  nlohmann::json role = message_body("hi");
  role["messages"][0]["role"] = "system";
  const std::pair<nlohmann::json, std::string> cases[] = {
      {no_max, "max_tokens"}, {image, "\"image\" blocks"}, {forced, "has no \"tools\""}, {role, "system"}};
  for (const auto& [body, expected] : cases) {
    const nlohmann::json e = post_json(c, "/v1/messages", body, &status, key);
    EXPECT_EQ(status, 400) << body.dump();
    EXPECT_EQ(e["type"], "error");
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    EXPECT_NE(e["error"]["message"].get<std::string>().find(expected), std::string::npos) << e.dump();
  }
  auto bad_json = c.Post("/v1/messages", key, "{nope", "application/json");
  ASSERT_TRUE(bad_json);
  EXPECT_EQ(bad_json->status, 400);
  EXPECT_EQ(nlohmann::json::parse(bad_json->body)["error"]["type"], "invalid_request_error");
  post_json(c, "/v1/messages", message_body("hi", 2), &status, key);
  EXPECT_EQ(status, 200);
}

// Gemma 4's own template over the demo weights: tools and tool-call histories from both APIs render into
// the prompt (the demo model was not trained to call tools, so what it answers is not checked here; the
// parsing of calls is assistant_output_test's).
TEST(MessagesApi, ToolsAndToolHistoriesRenderThroughGemma4Template) {
  DemoWithTemplate dir("gemma4.jinja");
  Served s(HttpServerOptions{}, true, dir.path());
  auto c = s.client();
  const nlohmann::json weather = {
      {"type", "function"},
      {"function",
       {{"name", "get_weather"},
        {"description", "The weather in a city"},
        {"parameters",
         {{"type", "object"},
          {"properties", {{"city", {{"type", "string"}, {"description", "City name"}}}}},
          {"required", {"city"}}}}}}};
  nlohmann::json plain = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                          {"max_tokens", 4},
                          {"temperature", 0}};
  nlohmann::json with_tools = plain;
  with_tools["tools"] = {weather};
  int status = 0;
  const nlohmann::json a = post_json(c, "/v1/chat/completions", plain, &status);
  ASSERT_EQ(status, 200) << a.dump();
  const nlohmann::json b = post_json(c, "/v1/chat/completions", with_tools, &status);
  ASSERT_EQ(status, 200) << b.dump();
  EXPECT_GT(b["usage"]["prompt_tokens"].get<int>(), a["usage"]["prompt_tokens"].get<int>() + 10)
      << "the tool's declaration is in the prompt";
  // A history with a call (arguments as OpenAI sends them: a JSON string) and its result.
  nlohmann::json history = with_tools;
  history["messages"].push_back(
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls",
        {{{"id", "call_1"},
          {"type", "function"},
          {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}});
  history["messages"].push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny, 21 C"}});
  const nlohmann::json h = post_json(c, "/v1/chat/completions", history, &status);
  EXPECT_EQ(status, 200) << h.dump();
  EXPECT_GT(h["usage"]["prompt_tokens"].get<int>(), b["usage"]["prompt_tokens"].get<int>());
  history["messages"][1]["tool_calls"][0]["function"]["arguments"] = "{not json";
  const nlohmann::json bad = post_json(c, "/v1/chat/completions", history, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(bad["error"]["message"].get<std::string>().find("arguments"), std::string::npos) << bad.dump();
  nlohmann::json forced = with_tools;
  forced["tool_choice"] = "required";
  forced["max_tokens"] = 64;
  // Gemma 4's call opening is forced, then its arguments are constrained to its own syntax and the tool's
  // schema. The demo model was not trained to call tools: in get_weather's required string it writes text and
  // never the closing <|"|> before max_tokens, so the answer is the call's cut text; with a boolean
  // parameter it closes, and the answer is a call whose arguments follow the schema.
  const nlohmann::json f = post_json(c, "/v1/chat/completions", forced, &status);
  ASSERT_EQ(status, 200) << f.dump();
  EXPECT_EQ(f["choices"][0]["finish_reason"], "length") << f.dump();
  EXPECT_EQ(f["choices"][0]["message"]["content"].get<std::string>().rfind(
                "<|tool_call>call:get_weather{city:<|\"|>", 0),
            0u)
      << f.dump();
  nlohmann::json counted = forced;
  counted["tools"][0]["function"]["parameters"] = {
      {"type", "object"}, {"properties", {{"metric", {{"type", "boolean"}}}}}, {"required", {"metric"}}};
  const nlohmann::json d = post_json(c, "/v1/chat/completions", counted, &status);
  ASSERT_EQ(status, 200) << d.dump();
  ASSERT_EQ(d["choices"][0]["finish_reason"], "tool_calls") << d.dump();
  const nlohmann::json& call = d["choices"][0]["message"]["tool_calls"][0]["function"];
  EXPECT_EQ(call["name"], "get_weather");
  const nlohmann::json arguments = nlohmann::json::parse(call["arguments"].get<std::string>());
  EXPECT_EQ(arguments.size(), 1u) << d.dump();
  EXPECT_TRUE(arguments["metric"].is_boolean()) << d.dump();
  forced["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  const nlohmann::json unknown = post_json(c, "/v1/chat/completions", forced, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(unknown["error"]["message"].get<std::string>().find("not among the request's tools"),
            std::string::npos)
      << unknown.dump();

  // The same conversation through the Messages API renders the same prompt.
  nlohmann::json anthropic = {
      {"model", "demo"},
      {"max_tokens", 4},
      {"temperature", 0},
      {"tools",
       {{{"name", "get_weather"},
         {"description", "The weather in a city"},
         {"input_schema", weather["function"]["parameters"]}}}},
      {"messages",
       {{{"role", "user"}, {"content", "Weather in Paris?"}},
        {{"role", "assistant"},
         {"content",
          {{{"type", "tool_use"},
            {"id", "call_1"},
            {"name", "get_weather"},
            {"input", {{"city", "Paris"}}}}}}},
        {{"role", "user"},
         {"content", {{{"type", "tool_result"}, {"tool_use_id", "call_1"}, {"content", "sunny, 21 C"}}}}}}}};
  const nlohmann::json m = post_json(c, "/v1/messages", anthropic, &status);
  ASSERT_EQ(status, 200) << m.dump();
  EXPECT_EQ(m["usage"]["input_tokens"].get<int>() + m["usage"]["cache_read_input_tokens"].get<int>(),
            h["usage"]["prompt_tokens"].get<int>());
}

// A forced tool call in a format with JSON arguments (Qwen 3's template over the demo weights): the opening
// is forced, the arguments constrained to a JSON object and the close appended, so every answer is a call —
// through both APIs, named or any tool.
TEST(MessagesApi, ForcedToolCallsAnswerWithACall) {
  DemoWithTemplate dir("qwen3.jinja");
  Served s(HttpServerOptions{}, true, dir.path());
  auto c = s.client();
  const nlohmann::json schema = {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}};
  const nlohmann::json tools = {
      {{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", schema}}}},
      {{"type", "function"}, {"function", {{"name", "get_time"}, {"parameters", schema}}}}};
  nlohmann::json chat = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                         {"max_tokens", 400},
                         {"temperature", 0},
                         {"tools", tools},
                         {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}};
  int status = 0;
  const nlohmann::json named = post_json(c, "/v1/chat/completions", chat, &status);
  ASSERT_EQ(status, 200) << named.dump();
  EXPECT_EQ(named["choices"][0]["finish_reason"], "tool_calls") << named.dump();
  ASSERT_EQ(named["choices"][0]["message"]["tool_calls"].size(), 1u) << named.dump();
  const nlohmann::json& call = named["choices"][0]["message"]["tool_calls"][0]["function"];
  EXPECT_EQ(call["name"], "get_time");
  // The arguments follow the tool's schema: only "city", a string.
  const auto args = nlohmann::json::parse(call["arguments"].get<std::string>());
  ASSERT_TRUE(args.is_object()) << call.dump();
  for (const auto& [key, value] : args.items())
    EXPECT_TRUE(key == "city" && value.is_string()) << call.dump();
  // Streamed: the same call as tool_calls deltas.
  nlohmann::json streamed = chat;
  streamed["stream"] = true;
  auto r = c.Post("/v1/chat/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  bool done = false;
  std::string name, arguments, finish;
  for (const auto& e : sse_events(r->body, &done)) {
    if (e["choices"].empty()) continue;
    const auto& choice = e["choices"][0];
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
      finish = choice["finish_reason"];
    if (!choice["delta"].contains("tool_calls")) continue;
    for (const auto& t : choice["delta"]["tool_calls"]) {
      if (t["function"].contains("name")) name += t["function"]["name"].get<std::string>();
      if (t["function"].contains("arguments")) arguments += t["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(name, "get_time");
  EXPECT_EQ(arguments, call["arguments"].get<std::string>());
  EXPECT_EQ(finish, "tool_calls");

  const nlohmann::json anthropic = {{"model", "demo"},
                                    {"max_tokens", 400},
                                    {"temperature", 0},
                                    {"tools",
                                     {{{"name", "get_weather"}, {"input_schema", schema}},
                                      {{"name", "get_time"}, {"input_schema", schema}}}},
                                    {"tool_choice", {{"type", "any"}}},
                                    {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}}};
  const nlohmann::json m = post_json(c, "/v1/messages", anthropic, &status);
  ASSERT_EQ(status, 200) << m.dump();
  EXPECT_EQ(m["stop_reason"], "tool_use") << m.dump();
  ASSERT_FALSE(m["content"].empty());
  const nlohmann::json& use = m["content"].back();
  EXPECT_EQ(use["type"], "tool_use") << m.dump();
  EXPECT_TRUE(use["name"] == "get_weather" || use["name"] == "get_time") << m.dump();
  EXPECT_TRUE(use["input"].is_object());
  for (const auto& [key, value] : use["input"].items())
    EXPECT_TRUE(key == "city" && value.is_string()) << m.dump();

  chat["tool_choice"] = "required";
  chat.erase("tools");
  const nlohmann::json none = post_json(c, "/v1/chat/completions", chat, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(none["error"]["message"].get<std::string>().find("has no \"tools\""), std::string::npos)
      << none.dump();
}

TEST(MessagesApi, MetricsCountWhatWasServed) {
  Served s;
  auto c = s.client();
  int status = 0;
  for (int i = 0; i < 2; ++i) post_json(c, "/v1/chat/completions", message_body("hello", 3), &status);
  post_json(c, "/v1/messages", message_body("hello", 3), &status);
  post_json(c, "/v1/chat/completions", {{"messages", "x"}}, &status);
  // (cpp-httplib logs — and counts — a request after its response is written: wait for the last one.)
  std::string m;
  for (int i = 0; i < 100; ++i) {
    auto r = c.Get("/metrics");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->get_header_value("Content-Type").find("text/plain"), std::string::npos);
    m = r->body;
    if (m.find("status=\"400\"") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto value = [&](const std::string& series) {
    const std::regex re("(^|\n)" + std::regex_replace(series, std::regex(R"([{}\"\[\]+.])"), R"(\$&)") +
                        " ([0-9.e+-]+)\n");
    std::smatch match;
    return std::regex_search(m, match, re) ? std::stod(match[2]) : -1.0;
  };
  EXPECT_EQ(value("lmx_http_requests_total{route=\"/v1/chat/completions\",status=\"200\"}"), 2) << m;
  EXPECT_EQ(value("lmx_http_requests_total{route=\"/v1/messages\",status=\"200\"}"), 1) << m;
  EXPECT_EQ(value("lmx_http_requests_total{route=\"/v1/chat/completions\",status=\"400\"}"), 1) << m;
  EXPECT_EQ(value("lmx_time_to_first_token_seconds_count"), 3) << m;
  EXPECT_GT(value("lmx_generation_tokens_total"), 0) << m;
  EXPECT_GT(value("lmx_prompt_tokens_total"), 0) << m;
  EXPECT_GT(value("lmx_kv_bytes_budget"), 0) << m;
  EXPECT_GE(value("lmx_prefix_cache_hit_rate"), 0) << m;
  EXPECT_EQ(value("lmx_queue_depth"), 0) << m;
  EXPECT_NE(m.find("# TYPE lmx_inter_token_latency_seconds histogram"), std::string::npos);
}

}  // namespace
}  // namespace lmx
