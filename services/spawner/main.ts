// The spawner actor: wiring only.
import { runActor } from '../../shared/actor.js';

await runActor('spawner', async () => ({}));
