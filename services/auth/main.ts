// The auth actor: wiring only.
import { runActor } from '../../shared/actor.js';

await runActor('auth', async () => ({}));
