// Passwords for `hub set-password` and `hub add-user`: asked for without echo on a terminal (twice, so a typo
// does not lock anyone out), read as one line from standard input otherwise (`echo "$PW" | hub add-user alice`).
import { CliError } from './hub.js';

/** A pipe that never delivers a line must not hold the command forever. */
const PIPE_TIMEOUT_MS = 30_000;

/** One line from standard input; on a terminal, typed without echo (backspace and Ctrl-U edit, Ctrl-C aborts). */
export function readSecretLine(prompt: string): Promise<string> {
  const stdin = process.stdin;
  const tty = stdin.isTTY === true;
  if (tty) {
    process.stderr.write(prompt);
    stdin.setRawMode(true);
  }
  return new Promise((resolve, reject) => {
    let text = '';
    const finish = (err?: Error) => {
      clearTimeout(timer);
      stdin.off('data', onData);
      stdin.off('end', onEnd);
      if (tty) {
        stdin.setRawMode(false);
        process.stderr.write('\n');
      }
      stdin.pause();
      if (err) reject(err);
      else resolve(text);
    };
    const timer = tty ? undefined : setTimeout(() => finish(new CliError(`no line on standard input within ${PIPE_TIMEOUT_MS / 1000} s`)), PIPE_TIMEOUT_MS);
    const onData = (chunk: Buffer) => {
      for (const ch of chunk.toString('utf8')) {
        if (ch === '\n' || ch === '\r' || ch === '\u0004') return finish();
        if (ch === '\u0003') {
          finish();
          process.exit(130);
        }
        if (tty && (ch === '\u007f' || ch === '\b')) text = Array.from(text).slice(0, -1).join('');
        else if (tty && ch === '\u0015') text = '';
        else text += ch;
      }
    };
    const onEnd = () => finish();
    stdin.on('data', onData);
    stdin.on('end', onEnd);
    stdin.resume();
  });
}

/** A new password for `name`, at least `minLength` characters (PasswordAuthenticator.min_password_length). */
export async function readNewPassword(name: string, minLength: number): Promise<string> {
  const password = await readSecretLine(`Password for ${name}: `);
  if (!password) throw new CliError('no password given (type it at the prompt, or give it as one line on standard input)');
  if (password.length < minLength) throw new CliError(`Passwords must be at least ${minLength} characters`);
  if (process.stdin.isTTY && (await readSecretLine('Again: ')) !== password) throw new CliError('the two passwords differ; nothing was changed');
  return password;
}
