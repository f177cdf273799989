// Drives `airlock mcp --http` (MCP's streamable HTTP transport) with the
// official MCP TypeScript SDK, against the real appliance e2e/sdk_test.go
// starts (AIRLOCK_BIN, AIRLOCK_SOCKET, and AIRLOCK_MCP_TOKEN_FILE, the
// bearer token file). Run: node --test mcp-http.test.mjs
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const bin = process.env.AIRLOCK_BIN;
const tokenFile = process.env.AIRLOCK_MCP_TOKEN_FILE;
let server;
let endpoint;
let token;
let client;
let sandbox;

// startServer runs `airlock mcp --http 127.0.0.1:0` and resolves with the
// endpoint it prints on stderr.
function startServer() {
  server = spawn(bin, ["mcp", "--http", "127.0.0.1:0", "--token-file", tokenFile], {
    env: { ...process.env }, stdio: ["ignore", "inherit", "pipe"],
  });
  let stderr = "";
  return new Promise((resolve, reject) => {
    server.stderr.on("data", (b) => {
      stderr += b;
      process.stderr.write(b);
      const m = stderr.match(/streamable HTTP on (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    server.on("exit", (code) => reject(new Error(`airlock mcp --http exited (${code}): ${stderr}`)));
  });
}

function connect(bearer) {
  const headers = bearer ? { Authorization: `Bearer ${bearer}` } : {};
  const c = new Client({ name: "airlock-mcp-http-test", version: "1.0.0" });
  return c.connect(new StreamableHTTPClientTransport(new URL(endpoint), { requestInit: { headers } })).then(() => c);
}

// A sandbox can take a while to create on a loaded host with Podman's vfs
// storage (a copy of the whole image), past the SDK's 60 s default.
async function call(name, args) {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 300_000 });
  assert.ok(!r.isError, `${name} failed: ${JSON.stringify(r.content)}`);
  return r.structuredContent;
}

before(async () => {
  assert.ok(bin && tokenFile && process.env.AIRLOCK_SOCKET,
    "AIRLOCK_BIN, AIRLOCK_SOCKET and AIRLOCK_MCP_TOKEN_FILE must be set (run through go test ./e2e -run TestSDKs)");
  token = readFileSync(tokenFile, "utf8").trim();
  endpoint = await startServer();
});

after(async () => {
  if (sandbox) await client.callTool({ name: "destroy_sandbox", arguments: { sandbox_id: sandbox } });
  await client?.close();
  server?.kill("SIGTERM");
});

test("refuses a client without the token, or with a wrong one", async () => {
  await assert.rejects(connect(undefined), /401|nauthorized/);
  await assert.rejects(connect(token + "x"), /401|nauthorized/);
  const r = await fetch(endpoint, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
  assert.equal(r.status, 401);
  assert.match(r.headers.get("www-authenticate") ?? "", /^Bearer/);
});

test("lists the tools, creates a sandbox and runs commands with the token", async () => {
  client = await connect(token);
  const { tools } = await client.listTools();
  assert.equal(tools.length, 8);
  const sb = await call("create_sandbox", {});
  sandbox = sb.sandbox_id;
  const r = await call("run_command", { sandbox_id: sandbox, command: "echo hi; exit 3" });
  assert.equal(r.exit_code, 3);
  assert.equal(r.stdout, "hi\n");
  const times = [];
  for (let i = 0; i < 20; i++) {
    const t0 = process.hrtime.bigint();
    const e = await call("run_command", { sandbox_id: sandbox, command: "echo hi" });
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    assert.equal(e.stdout, "hi\n");
  }
  times.sort((a, b) => a - b);
  console.log(`mcp run_command("echo hi") p50 ${times[10].toFixed(1)} ms over streamable HTTP (n=20)`);
});

test("writes and reads a file, then destroys the sandbox", async () => {
  await call("write_file", { sandbox_id: sandbox, path: "/workspace/http.txt", content: "over http\n" });
  const r = await call("read_file", { sandbox_id: sandbox, path: "/workspace/http.txt" });
  assert.equal(r.content, "over http\n");
  const d = await call("destroy_sandbox", { sandbox_id: sandbox });
  assert.equal(d.destroyed, sandbox);
  sandbox = undefined;
});
