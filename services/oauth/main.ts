// The oauth actor: wiring only.
import { runActor } from '../../shared/actor.js';

await runActor('oauth', async () => ({}));
