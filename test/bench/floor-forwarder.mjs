// The proxy bench's floor for a forwarder built as ours is (uWebSockets.js in front, node:net keep-alive
// sockets to the target): the least such a forwarder can do per request. It sends the method, path and
// Host to the target and answers the status line and body back, and nothing else: no header goes
// through either way, no X-Forwarded-For, no path normalisation, no routing table, no checks, no
// bounds, no timeouts. It only handles small responses read whole in one read (a Content-Length body,
// or one chunk and the last). A reference, not a proxy: what our gateway costs above it is the price of what it does.
// Usage: node floor-forwarder.mjs <target port> [<cert file> <key file>]; prints its own port. With a certificate it
// is a bare uWS SSLApp (the floor of HTTPS at the front door), with uWS's TLS defaults.
import net from 'node:net';
import { createRequire } from 'node:module';

const uWS = createRequire(import.meta.url)('uWebSockets.js');
const targetPort = Number(process.argv[2]);
const idle = [];
const readBuffer = Buffer.allocUnsafe(64 * 1024);
const END_OF_HEAD = Buffer.from('\r\n\r\n');

function connection() {
  const conn = { socket: null, res: null };
  conn.socket = net.connect({
    host: '127.0.0.1', port: targetPort, noDelay: true,
    onread: { buffer: readBuffer, callback: (n) => { answer(conn, readBuffer.subarray(0, n)); return true; } },
  });
  // a target closing an idle connection (node's keep-alive timeout) takes it out of the pool
  conn.socket.on('error', () => {});
  conn.socket.on('close', () => {
    const i = idle.indexOf(conn);
    if (i >= 0) idle.splice(i, 1);
    if (conn.res && !conn.res.aborted) conn.res.close();
    conn.res = null;
  });
  return conn;
}

function answer(conn, data) {
  const res = conn.res;
  conn.res = null;
  idle.push(conn);
  if (!res || res.aborted) return;
  const end = data.indexOf(END_OF_HEAD);
  const head = data.latin1Slice(0, end);
  const status = head.slice(9, head.indexOf('\r\n'));
  let body = data.subarray(end + 4);
  if (/\r\ntransfer-encoding: *chunked/i.test(head)) {
    // one chunk and the last one, all in this read
    const line = body.indexOf('\r\n');
    const size = parseInt(body.latin1Slice(0, line), 16);
    body = body.subarray(line + 2, line + 2 + size);
  }
  res.cork(() => res.writeStatus(status).end(body));
}

const [certFile, keyFile] = process.argv.slice(3);
(certFile ? uWS.SSLApp({ cert_file_name: certFile, key_file_name: keyFile }) : uWS.App()).any('/*', (res, req) => {
  res.onAborted(() => { res.aborted = true; });
  let conn = idle.pop();
  while (conn?.socket.destroyed) conn = idle.pop();
  conn ??= connection();
  conn.res = res;
  conn.socket.write(`${req.getCaseSensitiveMethod()} ${req.getUrl()} HTTP/1.1\r\nhost: ${req.getHeader('host')}\r\n\r\n`);
}).listen('127.0.0.1', 0, (listenSocket) => {
  if (!listenSocket) throw new Error('the floor forwarder could not listen');
  console.log(uWS.us_socket_local_port(listenSocket));
});
