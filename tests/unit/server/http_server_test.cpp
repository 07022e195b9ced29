// The HTTP server over real loopback HTTP (cpp-httplib's client) with the demo model: health and models;
// chat and text completions, whole and streamed (chunks as OpenAI sends them, the same text either way, a
// usage chunk, [DONE]); malformed JSON, wrong types, unknown routes, huge bodies, a bad API key, too many
// requests at once; a client that disconnects mid-stream has its request cancelled; 32 concurrent greedy
// requests each answer what the same request answers alone; 100 concurrent streams all complete; a second
// turn reports cached prompt tokens.
#include "served.h"

#include <gtest/gtest.h>

#include <future>
#include <sstream>
#include <thread>

namespace lmx {
namespace {

nlohmann::json chat_body(const std::string& text, int max_tokens = 12) {
  return {
      {"messages", {{{"role", "user"}, {"content", text}}}}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

TEST(HttpServer, HealthAndModels) {
  Served s;
  auto c = s.client();
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(nlohmann::json::parse(health->body)["status"], "ok");
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const auto m = nlohmann::json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "demo");
}

TEST(HttpServer, ChatCompletionWholeAndStreamedAgree) {
  Served s;
  auto c = s.client();
  int status = 0;
  const nlohmann::json whole = post_json(c, "/v1/chat/completions", chat_body("Tell me a riddle."), &status);
  ASSERT_EQ(status, 200) << whole.dump();
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["model"], "demo");
  const auto& choice = whole["choices"][0];
  EXPECT_EQ(choice["message"]["role"], "assistant");
  const std::string text = choice["message"]["content"];
  EXPECT_FALSE(text.empty());
  EXPECT_TRUE(choice["finish_reason"] == "length" || choice["finish_reason"] == "stop");
  EXPECT_EQ(whole["usage"]["total_tokens"],
            whole["usage"]["prompt_tokens"].get<int>() + whole["usage"]["completion_tokens"].get<int>());

  nlohmann::json body = chat_body("Tell me a riddle.");
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  bool done = false;
  const auto events = sse_events(r->body, &done);
  EXPECT_TRUE(done) << "the stream ends with data: [DONE]";
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
  std::string streamed;
  for (const auto& e : events) {
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content"))
      streamed += e["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, text) << "greedy: the stream's text is the whole answer's";
  const auto& finish = events[events.size() - 2];
  EXPECT_EQ(finish["choices"][0]["finish_reason"], choice["finish_reason"]);
  const auto& usage = events.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], whole["usage"]["completion_tokens"]);
  // The same prompt again: its KV came from the prefix cache.
  EXPECT_GT(usage["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
}

TEST(HttpServer, TextCompletionsWithIdsEchoAndLogprobs) {
  Served s;
  auto c = s.client();
  int status = 0;
  const nlohmann::json r = post_json(c, "/v1/completions",
                                     {{"prompt", "Once upon a time"},
                                      {"max_tokens", 6},
                                      {"temperature", 0},
                                      {"echo", true},
                                      {"logprobs", 2}},
                                     &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "text_completion");
  const std::string text = r["choices"][0]["text"];
  EXPECT_EQ(text.rfind("Once upon a time", 0), 0u) << text;
  EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"].size(), r["usage"]["completion_tokens"].get<size_t>());
  EXPECT_EQ(r["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
  const nlohmann::json ids = post_json(
      c, "/v1/completions", {{"prompt", {2, 397, 729}}, {"max_tokens", 3}, {"temperature", 0}}, &status);
  EXPECT_EQ(status, 200) << ids.dump();
  const nlohmann::json bad = post_json(c, "/v1/completions", {{"prompt", {2, -5}}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(bad["error"]["param"], "prompt");
}

TEST(HttpServer, BadRequestsGetOpenAiErrors) {
  HttpServerOptions o;
  o.max_body_bytes = 4096;
  o.max_tokens_limit = 100;
  Served s(o);
  auto c = s.client();
  auto raw = [&](const std::string& path, const std::string& body) {
    auto r = c.Post(path.c_str(), body, "application/json");
    EXPECT_TRUE(r);
    return std::make_pair(r ? r->status : 0,
                          r ? nlohmann::json::parse(r->body, nullptr, false) : nlohmann::json());
  };
  const std::pair<std::string, std::string> cases[] = {
      {"{bad", "invalid JSON"},
      {"[1, 2]", "must be a JSON object"},
      {R"({"messages": "hi"})", "\"messages\" must be a non-empty array"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "wizard"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "only \"text\" parts"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1000})",
       "more than this server allows"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": -1})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})",
       "\"stream\" must be a boolean"},
  };
  for (const auto& [body, expected] : cases) {
    const auto [status, json] = raw("/v1/chat/completions", body);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(json["error"]["type"], "invalid_request_error") << body;
    EXPECT_NE(json["error"]["message"].get<std::string>().find(expected), std::string::npos)
        << body << " -> " << json.dump();
  }
  const auto [big_status, big] = raw("/v1/chat/completions", std::string(10000, ' '));
  EXPECT_EQ(big_status, 413);
  EXPECT_EQ(big["error"]["type"], "request_too_large");
  auto missing = c.Get("/v1/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(nlohmann::json::parse(missing->body)["error"]["type"], "not_found_error");
  // The server still answers.
  int status = 0;
  post_json(c, "/v1/chat/completions", chat_body("hello", 2), &status);
  EXPECT_EQ(status, 200);
}

TEST(HttpServer, ApiKeyIsRequiredWhenSet) {
  HttpServerOptions o;
  o.api_key = "secret";
  Served s(o);
  auto c = s.client();
  int status = 0;
  const nlohmann::json refused = post_json(c, "/v1/chat/completions", chat_body("hi", 2), &status);
  EXPECT_EQ(status, 401);
  EXPECT_EQ(refused["error"]["type"], "authentication_error");
  post_json(c, "/v1/chat/completions", chat_body("hi", 2), &status, {{"Authorization", "Bearer wrong"}});
  EXPECT_EQ(status, 401);
  post_json(c, "/v1/chat/completions", chat_body("hi", 2), &status, {{"Authorization", "Bearer secret"}});
  EXPECT_EQ(status, 200);
  post_json(c, "/v1/chat/completions", chat_body("hi", 2), &status, {{"x-api-key", "secret"}});
  EXPECT_EQ(status, 200);
  auto health = c.Get("/health");  // operations need no key
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// A streaming client that stops reading after its first chunk: the request is cancelled and the engine goes
// idle long before its 1500 tokens; meanwhile a second request beyond max_concurrent = 1 is answered 429.
TEST(HttpServer, DisconnectCancelsAndTheLimitAnswers429) {
  HttpServerOptions o;
  o.max_concurrent = 1;
  Served s(o, /*stop_tokens=*/false);
  nlohmann::json body = chat_body("Tell me a long story.", 1500);
  body["stream"] = true;
  std::promise<void> first_chunk;
  std::thread client([&] {
    auto c = s.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    bool signalled = false;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      if (!signalled) first_chunk.set_value(), signalled = true;
      return false;  // hang up
    };
    (void)c.send(req);
  });
  ASSERT_EQ(first_chunk.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  // (The slot may already be free if the server noticed the hang-up at once.)
  auto c = s.client();
  int status = 0;
  post_json(c, "/v1/chat/completions", chat_body("hi", 2), &status);
  EXPECT_TRUE(status == 429 || status == 200) << status;
  client.join();
  for (int i = 0; i < 200 && !s.engine().idle(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(s.engine().idle()) << "the disconnected request still runs";
  EXPECT_LT(s.engine().stats().generated_tokens, 1000);
  post_json(c, "/v1/chat/completions", chat_body("hi", 2), &status);
  EXPECT_EQ(status, 200);
}

// 32 greedy requests at once: each answers what it answers alone.
TEST(HttpServer, ConcurrentGreedyRequestsEqualSoloOnes) {
  Served s;
  std::vector<std::string> prompts;
  for (int i = 0; i < 32; ++i)
    prompts.push_back("Question " + std::to_string(i) + ": what is " + std::to_string(i * 7) + "?");
  std::vector<std::string> solo;
  {
    auto c = s.client();
    for (const auto& p : prompts) {
      int status = 0;
      solo.push_back(
          post_json(c, "/v1/chat/completions", chat_body(p), &status)["choices"][0]["message"]["content"]);
    }
  }
  s.server();  // (the same server, now loaded)
  std::vector<std::future<std::string>> together;
  for (size_t i = 0; i < prompts.size(); ++i)
    together.push_back(std::async(std::launch::async, [&, i] {
      auto c = s.client();
      nlohmann::json body = chat_body(prompts[i]);
      if (i % 2 == 1) body["stream"] = true;
      auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
      if (!r) return std::string("(no answer)");
      if (i % 2 == 0)
        return nlohmann::json::parse(r->body)["choices"][0]["message"]["content"].get<std::string>();
      bool done = false;
      std::string text;
      for (const auto& e : sse_events(r->body, &done))
        if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content"))
          text += e["choices"][0]["delta"]["content"].get<std::string>();
      return text;
    }));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i].get(), solo[i]) << prompts[i];
}

// response_format json_object: the answer is one JSON object (constrained decoding), whole and streamed;
// json_schema is refused with a clear error.
TEST(HttpServer, ResponseFormatJsonObject) {
  Served s;
  auto c = s.client();
  nlohmann::json body = chat_body("Describe a cat as JSON.", 120);
  body["response_format"] = {{"type", "json_object"}};
  int status = 0;
  const nlohmann::json whole = post_json(c, "/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200) << whole.dump();
  const std::string text = whole["choices"][0]["message"]["content"];
  if (whole["choices"][0]["finish_reason"] == "stop")
    EXPECT_TRUE(nlohmann::json::parse(text, nullptr, false).is_object()) << text;
  body["stream"] = true;
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  bool done = false;
  std::string streamed;
  for (const auto& e : sse_events(r->body, &done))
    if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content"))
      streamed += e["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(streamed, text);
  body["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}};
  const nlohmann::json refused = post_json(c, "/v1/chat/completions", body, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(refused["error"]["param"], "response_format");
}

// response_format json_schema: the answer is JSON the schema accepts (constrained decoding: only its
// properties, each once, required ones before the close, values of their types); a schema outside the
// supported subset is a 400 naming the keyword.
TEST(HttpServer, ResponseFormatJsonSchema) {
  Served s;
  auto c = s.client();
  const nlohmann::json schema = {{"type", "object"},
                                 {"properties",
                                  {{"name", {{"type", "string"}}},
                                   {"legs", {{"type", "integer"}}},
                                   {"color", {{"enum", {"black", "white", "orange"}}}},
                                   {"toys", {{"type", "array"}, {"items", {{"type", "string"}}}}}}},
                                 {"required", {"name", "legs", "color"}},
                                 {"additionalProperties", false}};
  nlohmann::json body = chat_body("Describe a cat as JSON.", 200);
  body["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"name", "cat"}, {"schema", schema}, {"strict", true}}}};
  body["n"] = 3;
  body["temperature"] = 0.8;
  body["seed"] = 3;
  int status = 0;
  const nlohmann::json whole = post_json(c, "/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200) << whole.dump();
  int closed = 0;
  for (const auto& choice : whole["choices"]) {
    if (choice["finish_reason"] != "stop") continue;
    ++closed;
    const std::string text = choice["message"]["content"];
    const auto cat = nlohmann::json::parse(text, nullptr, false);
    ASSERT_TRUE(cat.is_object()) << text;
    EXPECT_TRUE(cat["name"].is_string()) << text;
    EXPECT_TRUE(cat["legs"].is_number_integer()) << text;
    EXPECT_TRUE(cat["color"] == "black" || cat["color"] == "white" || cat["color"] == "orange") << text;
    for (const auto& [key, value] : cat.items())
      EXPECT_TRUE(key == "name" || key == "legs" || key == "color" || (key == "toys" && value.is_array()))
          << text;
  }
  EXPECT_GT(closed, 0) << whole.dump();
  body["response_format"]["json_schema"]["schema"]["properties"]["name"]["pattern"] = "^[A-Z]";
  const nlohmann::json refused = post_json(c, "/v1/chat/completions", body, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("\"pattern\" is not supported"),
            std::string::npos)
      << refused.dump();
}

// 100 streams at once (beyond the default 64 in flight: the limit raised): every one ends with its finish
// chunk and [DONE], and the server answers afterwards.
TEST(HttpServer, HundredConcurrentStreamsComplete) {
  HttpServerOptions o;
  o.max_concurrent = 128;
  Served s(o, /*stop_tokens=*/false);
  std::vector<std::future<std::pair<bool, std::string>>> streams;
  for (int i = 0; i < 100; ++i)
    streams.push_back(std::async(std::launch::async, [&, i] {
      auto c = s.client();
      nlohmann::json body = chat_body("Stream " + std::to_string(i), 6);
      body["stream"] = true;
      auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
      if (!r || r->status != 200)
        return std::make_pair(false, r ? std::to_string(r->status) + r->body : httplib::to_string(r.error()));
      bool done = false;
      std::string finish;
      for (const auto& e : sse_events(r->body, &done))
        if (!e["choices"].empty() && !e["choices"][0]["finish_reason"].is_null())
          finish = e["choices"][0]["finish_reason"];
      return std::make_pair(done, finish);
    }));
  for (auto& f : streams) {
    const auto [done, finish] = f.get();
    EXPECT_TRUE(done);
    EXPECT_EQ(finish, "length");
  }
  auto c = s.client();
  int status = 0;
  post_json(c, "/v1/chat/completions", chat_body("hi", 2), &status);
  EXPECT_EQ(status, 200);
}

}  // namespace
}  // namespace lmx
