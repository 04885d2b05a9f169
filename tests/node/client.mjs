// One call through an official Node SDK, for tests/proxy/test_node_sdks.py. Prints one JSON line:
// {"cache": x-cachekit-cache, "text": the answer's text, "usage": the answer's usage}.
// Arguments: sdk (anthropic | openai), mode (plain | stream), base URL, API key, model, prompt.
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

const [sdk, mode, baseURL, apiKey, model, prompt] = process.argv.slice(2);

async function anthropic() {
  const client = new Anthropic({ apiKey, baseURL, maxRetries: 0 });
  const params = { model, max_tokens: 32, messages: [{ role: "user", content: prompt }] };
  if (mode === "stream") {
    const { data: stream, response } = await client.messages.create({ ...params, stream: true }).withResponse();
    let text = "";
    let usage = {};
    for await (const event of stream) {
      if (event.type === "message_start") usage = { ...event.message.usage };
      if (event.type === "content_block_delta" && event.delta.type === "text_delta") text += event.delta.text;
      if (event.type === "message_delta") usage = { ...usage, ...event.usage };
    }
    return { cache: response.headers.get("x-cachekit-cache"), text, usage };
  }
  const { data, response } = await client.messages.create(params).withResponse();
  return { cache: response.headers.get("x-cachekit-cache"), text: data.content[0].text, usage: data.usage };
}

async function openai() {
  const client = new OpenAI({ apiKey, baseURL, maxRetries: 0 });
  const params = { model, messages: [{ role: "user", content: prompt }] };
  if (mode === "stream") {
    const { data: stream, response } = await client.chat.completions
      .create({ ...params, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    let text = "";
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.choices.length) text += chunk.choices[0].delta.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    return { cache: response.headers.get("x-cachekit-cache"), text, usage };
  }
  const { data, response } = await client.chat.completions.create(params).withResponse();
  return { cache: response.headers.get("x-cachekit-cache"), text: data.choices[0].message.content, usage: data.usage };
}

const result = await (sdk === "anthropic" ? anthropic() : openai());
process.stdout.write(JSON.stringify(result) + "\n");
