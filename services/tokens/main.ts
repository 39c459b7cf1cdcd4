// The tokens actor: wiring only.
import { runActor } from '../../shared/actor.js';

await runActor('tokens', async () => ({}));
