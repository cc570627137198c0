import type { ServiceGroup } from '../../client/index.js';
import { age, details, listTable } from '../shared/output.js';
import { portText } from '../shared/parse.js';

export function groupsTable(list: ServiceGroup[]): string {
  return listTable(
    list,
    [
      { header: 'NAME', value: (g) => g.name },
      { header: 'FQDN', value: (g) => (g.domains as { fqdn: string }[]).map((d) => d.fqdn).join(',') },
      { header: 'SERVICES', value: (g) => g.services.map(portText).join(',') },
      { header: 'INSTANCES', value: (g) => g.instances.map((i) => i.name).join(',') },
      { header: 'PERSISTENT', value: (g) => String(g.persistent) },
      { header: 'AUTOSCALE', value: (g) => String(g.autoscale) },
      { header: 'CREATED', value: (g) => age(g.created_at) },
    ],
    'no service groups',
  );
}

export function groupDetails(g: ServiceGroup): string {
  return details({
    ...g,
    services: g.services.map(portText).join(', '),
    instances: g.instances.map((i) => i.name).join(', '),
  });
}
