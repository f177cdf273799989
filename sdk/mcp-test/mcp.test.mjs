// Drives `airlock mcp` over stdio with the official MCP TypeScript SDK,
// against the real appliance e2e/sdk_test.go starts (AIRLOCK_BIN,
// AIRLOCK_SOCKET). Run: node --test mcp.test.mjs
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const bin = process.env.AIRLOCK_BIN;
const socket = process.env.AIRLOCK_SOCKET;
const DENIED = "bad.pkg.example.test"; // deny.hosts[0] of the e2e policy
let client;
let sandbox;

async function call(name, args) {
  const r = await client.callTool({ name, arguments: args });
  assert.ok(!r.isError, `${name} failed: ${JSON.stringify(r.content)}`);
  return r.structuredContent;
}

before(async () => {
  assert.ok(bin && socket, "AIRLOCK_BIN and AIRLOCK_SOCKET must be set (run through go test ./e2e -run TestSDKs)");
  const transport = new StdioClientTransport({ command: bin, args: ["mcp"], env: { ...process.env }, stderr: "inherit" });
  client = new Client({ name: "airlock-mcp-test", version: "1.0.0" });
  await client.connect(transport);
});

after(async () => {
  if (sandbox) await client.callTool({ name: "destroy_sandbox", arguments: { sandbox_id: sandbox } });
  await client?.close();
});

test("lists the tools with descriptions and schemas", async () => {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ["create_sandbox", "destroy_sandbox", "egress_log", "list_files", "read_file",
    "request_access", "run_command", "write_file"]);
  for (const t of tools) {
    assert.ok(t.description.length > 40, `${t.name} has a description`);
    assert.equal(t.inputSchema.type, "object");
  }
  const run = tools.find((t) => t.name === "run_command");
  assert.deepEqual([...run.inputSchema.required].sort(), ["command", "sandbox_id"]);
  assert.match(run.inputSchema.properties.command.description, /shell/);
});

test("creates a sandbox and runs a command", async () => {
  const sb = await call("create_sandbox", {});
  assert.match(sb.sandbox_id, /\S/);
  sandbox = sb.sandbox_id;
  const r = await call("run_command", { sandbox_id: sandbox, command: "echo hi; echo oops >&2; exit 3" });
  assert.equal(r.exit_code, 3);
  assert.equal(r.stdout, "hi\n");
  assert.equal(r.stderr, "oops\n");
  assert.ok(r.exec_id);
  const times = [];
  for (let i = 0; i < 20; i++) {
    const t0 = process.hrtime.bigint();
    const e = await call("run_command", { sandbox_id: sandbox, command: "echo hi" });
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    assert.equal(e.stdout, "hi\n");
  }
  times.sort((a, b) => a - b);
  console.log(`mcp run_command("echo hi") p50 ${times[10].toFixed(1)} ms over stdio (n=20)`);
  const slow = await call("run_command", { sandbox_id: sandbox, command: "sleep 30", timeout_seconds: 1 });
  assert.equal(slow.timed_out, true);
});

test("writes, reads and lists a file", async () => {
  const w = await call("write_file", { sandbox_id: sandbox, path: "/workspace/notes/todo.md", content: "# todo\nship it\n" });
  assert.equal(w.size, 15);
  const r = await call("read_file", { sandbox_id: sandbox, path: "/workspace/notes/todo.md" });
  assert.equal(r.content, "# todo\nship it\n");
  const l = await call("list_files", { sandbox_id: sandbox, path: "/workspace/notes" });
  assert.deepEqual(l.entries.map((e) => [e.name, e.type]), [["todo.md", "file"]]);
});

test("a denial shows in egress_log with its rule and reason", async () => {
  const r = await call("run_command", { sandbox_id: sandbox, command: `curl -sS -m 5 https://${DENIED}/x` });
  assert.notEqual(r.exit_code, 0);
  let d;
  for (let i = 0; i < 30 && !d; i++) {
    const log = await call("egress_log", { sandbox_id: sandbox });
    if (log.decisions.length && log.decisions[0].verdict === "deny" && log.decisions[0].destination.includes(DENIED)) d = log;
    else await new Promise((res) => setTimeout(res, 300));
  }
  assert.ok(d, "a denial of the host comes first");
  assert.ok(d.denied >= 1);
  assert.match(d.decisions[0].rule, /^deny\.hosts\[0\]/);
  assert.ok(d.decisions[0].reason.length > 0);
});

test("request_access is pending until a person approves it", async () => {
  const p = await call("request_access", { sandbox_id: sandbox, destination: "https://docs.example.test/", reason: "read the docs" });
  assert.equal(p.status, "pending");
  assert.match(p.hint, /airlock approve/);
  execFileSync(bin, ["approve", p.approval_id, "--once"], { env: { ...process.env }, stdio: "inherit" });
  const g = await call("request_access", { sandbox_id: sandbox, approval_id: p.approval_id, wait_seconds: 10 });
  assert.equal(g.status, "granted");
  assert.ok(g.decided_by);
});

test("errors are tool errors with the reason", async () => {
  const r = await client.callTool({ name: "run_command", arguments: { sandbox_id: "sb-does-not-exist", command: "true" } });
  assert.equal(r.isError, true);
  assert.match(r.content[0].text, /not_found/);
  const e = await client.callTool({ name: "request_access", arguments: { sandbox_id: sandbox } });
  assert.equal(e.isError, true);
  assert.match(e.content[0].text, /give a destination/);
});

test("destroys the sandbox", async () => {
  const d = await call("destroy_sandbox", { sandbox_id: sandbox });
  assert.equal(d.destroyed, sandbox);
  const r = await client.callTool({ name: "list_files", arguments: { sandbox_id: sandbox } });
  assert.equal(r.isError, true);
  sandbox = undefined;
});
