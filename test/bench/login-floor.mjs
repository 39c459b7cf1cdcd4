// The login bench's floor: the least a hub built as ours is (a front door, and the password checked in another
// process) can do for a form login against LDAP. The front door (uWebSockets.js, as our gateway) reads the form,
// sends the name and password as one line of JSON over a unix socket to the second process, which makes the same
// LDAP exchanges as our ldap backend with bind_dn_template (connect, bind as the person, read the person's entry,
// unbind), and answers 302 with a random session cookie. Nothing else: no XSRF check, no lockout, no session kept,
// no cookie sealed, no user admitted, no log line, no audit event, no metrics, no deadline. A reference, not a
// login: what our hub adds above it is the price of what it does.
// Usage: node login-floor.mjs front <port> <socket>   (prints "listening" when it is)
//        node login-floor.mjs auth <socket> <ldap url> <bind DN template with {username}>   (prints "listening")
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import net from 'node:net';

const require = createRequire(import.meta.url);
const [role, ...args] = process.argv.slice(2);

if (role === 'auth') {
  const { Client } = require('ldapts');
  const [socketPath, url, template] = args;
  const check = async (username, password) => {
    const dn = template.replace('{username}', username);
    const client = new Client({ url, timeout: 5000, connectTimeout: 5000 });
    try {
      await client.bind(dn, password);
      await client.search(dn, { scope: 'base', attributes: ['mail', 'displayName'] });
      return true;
    } catch {
      return false;
    } finally {
      client.unbind().catch(() => {});
    }
  };
  net.createServer((socket) => {
    let pending = '';
    socket.on('data', (chunk) => {
      pending += chunk.toString();
      let newline;
      while ((newline = pending.indexOf('\n')) >= 0) {
        const { id, username, password } = JSON.parse(pending.slice(0, newline));
        pending = pending.slice(newline + 1);
        void check(username, password).then((ok) => socket.write(`${JSON.stringify({ id, ok })}\n`));
      }
    });
    socket.on('error', () => {});
  }).listen(socketPath, () => console.log('listening'));
} else if (role === 'front') {
  const uWS = require('uWebSockets.js');
  const [port, socketPath] = args;
  const waiting = new Map();
  let nextId = 0;
  let pending = '';
  const auth = net.connect(socketPath);
  auth.on('data', (chunk) => {
    pending += chunk.toString();
    let newline;
    while ((newline = pending.indexOf('\n')) >= 0) {
      const { id, ok } = JSON.parse(pending.slice(0, newline));
      pending = pending.slice(newline + 1);
      waiting.get(id)?.(ok);
      waiting.delete(id);
    }
  });
  uWS.App()
    .get('/hub/login', (res) => {
      res.writeHeader('set-cookie', '_xsrf=floor; Path=/hub/').end('<form><input name="_xsrf" value="floor"></form>');
    })
    .post('/hub/login', (res) => {
      const chunks = [];
      res.onAborted(() => { res.aborted = true; });
      res.onData((chunk, last) => {
        chunks.push(Buffer.from(chunk));
        if (!last) return;
        const form = new URLSearchParams(Buffer.concat(chunks).toString());
        const id = nextId++;
        waiting.set(id, (ok) => {
          if (res.aborted) return;
          res.cork(() => {
            if (!ok) return res.writeStatus('403 Forbidden').end('wrong name or password');
            res.writeStatus('302 Found').writeHeader('location', '/hub/home')
              .writeHeader('set-cookie', `floor-login=${randomBytes(16).toString('hex')}; Path=/hub/; HttpOnly`).end();
          });
        });
        auth.write(`${JSON.stringify({ id, username: form.get('username'), password: form.get('password') })}\n`);
      });
    })
    .listen('127.0.0.1', Number(port), (listening) => {
      if (!listening) {
        console.error(`login floor: cannot listen on ${port}`);
        process.exit(1);
      }
      console.log('listening');
    });
} else {
  console.error('usage: login-floor.mjs front <port> <socket> | auth <socket> <ldap url> <dn template>');
  process.exit(2);
}
